package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/internal/ordertest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// gpuHarness is the daemon with the fair scheduler over a fake inventory
// of whole GPUs (the test hook: the daemon itself never picks the fake)
// and, beside native and wasm, this node's real gVisor backend, whose GPU
// answer is this node's.
func gpuHarness(t *testing.T, cfg config.Config, devices int) (*harness, *gpu.Allocator, *server.Fair) {
	t.Helper()
	alloc, err := gpu.NewAllocator(context.Background(), gpu.NewFake(devices, 16<<30), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := server.NewFairGPU(cfg, alloc)
	if err != nil {
		t.Fatal(err)
	}
	gvisor := func(dir string, _ *store.Store) []sandbox.Backend {
		agent := filepath.Join(dir, "wovyr-guest")
		cmd := exec.Command("go", "build", "-o", agent, "github.com/wovyr/wovyr/cmd/wovyr-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the guest agent: %v\n%s", err, out)
		}
		g, err := oci.NewGVisor(oci.Config{StateDir: dir, Agent: agent, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return []sandbox.Backend{g}
	}
	h := startHarness(t, cfg, "", gvisor, func(o *server.Options) { o.Admission = fair })
	h.waitReady()
	return h, alloc, fair
}

func gpuConfig(tenants ...config.Tenant) config.Config {
	cfg := testConfig()
	cfg.Concurrency = 8
	cfg.Tenants = append(cfg.Tenants, tenants...)
	return cfg
}

func gpuInvocation(trust sandbox.TrustClass, gpus int64, argv ...string) *sandbox.Invocation {
	inv := &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv,
			Env: []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0,1,2,3"}},
		Policy: sandbox.Policy{Trust: trust},
	}
	inv.Resources.GPU = gpus
	return inv
}

// TestGPUEndToEnd: through the daemon on the fake inventory, an untrusted
// tenant's GPU invocation is refused (409 floor-unmet) with the reason of
// every backend at its floor on this node; a trusted one runs on native
// with exactly its assigned device named, whatever its own environment
// says; the device is in use for that tenant meanwhile and free after; a
// tenant's max_gpus is enforced; a bad GPU request is 400.
func TestGPUEndToEnd(t *testing.T) {
	cfg := gpuConfig(config.Tenant{Name: "carol", MaxGPUs: 1, TokenSHA256: []string{config.HashToken("carol-token")}})
	h, alloc, _ := gpuHarness(t, cfg, 2)
	c := h.client(aliceToken)
	ctx := context.Background()

	_, err := c.Run(ctx, gpuInvocation(sandbox.Untrusted, 1, "true"))
	var ce *client.Error
	want := "floor-unmet: no usable backend at or above gvisor for a command workload; " +
		"gvisor: no GPUs: runsc nvproxy unavailable: no NVIDIA driver on this node"
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != sandbox.FloorUnmet || ce.Message != want {
		t.Fatalf("untrusted GPU invocation: %v\nwant 409 %s", err, want)
	}

	res, err := c.Run(ctx, gpuInvocation(sandbox.Trusted, 1, "sh", "-c", `echo "$NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Backend != "native" || string(res.Stdout) != "GPU-fake-0 GPU-fake-0\n" {
		t.Fatalf("trusted GPU invocation on %s printed %q, want native and its assigned device only", res.Backend, res.Stdout)
	}
	// The device is scrubbed and freed after the result is recorded.
	waitFree(t, alloc, 2)

	carol := h.client("carol-token")
	_, err = carol.Run(ctx, gpuInvocation(sandbox.Trusted, 2, "true"))
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Message != "bad-input (resources): task demands 2 GPUs, tenant carol may hold 1" {
		t.Fatalf("2 GPUs over carol's max_gpus of 1: %v", err)
	}
	_, err = c.Run(ctx, gpuInvocation(sandbox.Trusted, 3, "true"))
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest ||
		ce.Message != "bad-input (resources): demand {cpu=1000m mem=0B gpu=3} exceeds capacity {cpu=8000m mem=4611686018427387904B gpu=2}" {
		t.Fatalf("3 GPUs on a 2-GPU node: %v", err)
	}
	// Past the schema (raw): the daemon's own check answers.
	resp, body := h.raw("POST", "/v1/invocations", aliceToken, strings.NewReader(
		`{"workload":{"kind":"command","argv":["true"]},"policy":{"trust":"trusted"},"resources":{"gpu":1,"gpu_min_memory_bytes":-1}}`), nil)
	if want := `{"code":"bad-input","message":"bad-input (resources.gpu_min_memory_bytes): must not be negative","field":"resources.gpu_min_memory_bytes"}`; resp.StatusCode != http.StatusBadRequest || strings.TrimSpace(string(body)) != want {
		t.Fatalf("negative GPU memory: %d %s\nwant 400 %s", resp.StatusCode, body, want)
	}
}

// TestGPUFairnessAcrossTenants: three tenants of weights 2, 1 and 1 queue
// four GPU invocations each behind a blocker holding the only device; the
// starts, one device at a time, follow weighted round-robin (a b c a, twice,
// then b c b c), and the metrics show the device in use by its holder and
// the queue waits of all thirteen.
func TestGPUFairnessAcrossTenants(t *testing.T) {
	tenant := func(name string, w int) config.Tenant {
		return config.Tenant{Name: name, Weight: w, TokenSHA256: []string{config.HashToken(name + "-token")}}
	}
	h, alloc, fair := gpuHarness(t, gpuConfig(tenant("ta", 2), tenant("tb", 1), tenant("tc", 1), tenant("tz", 1)), 1)
	order := ordertest.New(t)
	ctx := context.Background()

	// The blocker holds the device until the test opens the gate.
	blocker := gpuInvocation(sandbox.Trusted, 1, "sh", "-c", order.Blocker())
	brec, err := h.client("tz-token").Submit(ctx, blocker, 0)
	if err != nil {
		t.Fatal(err)
	}
	for alloc.Snapshot()[0].Tenant != "tz" {
		time.Sleep(5 * time.Millisecond)
	}
	_, body := h.raw("GET", "/metrics", opsToken, nil, nil)
	if !strings.Contains(string(body), `wovyr_gpu_in_use{device="GPU-fake-0",tenant="tz"} 1`) {
		t.Fatalf("metrics while tz holds the device lack its in-use line:\n%s", grepLines(body, "wovyr_gpu"))
	}

	var ids []string
	for i := range 4 {
		for _, tn := range []string{"ta", "tb", "tc"} {
			inv := gpuInvocation(sandbox.Trusted, 1, "sh", "-c", order.Record(tn))
			rec, err := h.client(tn+"-token").Submit(ctx, inv, 0)
			if err != nil {
				t.Fatalf("%s #%d: %v", tn, i, err)
			}
			ids = append(ids, tn+"/"+rec.ID)
		}
	}
	for fair.Queued() < 12 {
		time.Sleep(5 * time.Millisecond)
	}
	order.Open(t)
	var wg sync.WaitGroup
	for _, id := range append(ids, "tz/"+brec.ID) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, id, _ := strings.Cut(id, "/")
			rec, err := h.client(tn+"-token").Get(ctx, id, 30*time.Second)
			if err != nil || rec.State != "done" {
				t.Errorf("%s %s: %v %+v", tn, id, err, rec)
			}
		}()
	}
	wg.Wait()
	order.Want(t, "ta tb tc ta ta tb tc ta tb tc tb tc")
	waitFree(t, alloc, 1)
	resp, body := h.raw("GET", "/metrics", opsToken, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "wovyr_gpu_queue_wait_seconds_count 13") || strings.Contains(string(body), "wovyr_gpu_in_use{") ||
		!strings.Contains(string(body), `wovyr_gpu_quarantined{device="GPU-fake-0"} 0`) {
		t.Fatalf("metrics after the runs (%d):\n%s", resp.StatusCode, grepLines(body, "wovyr_gpu"))
	}
}

// waitFree waits until n devices are free again: a finished invocation's
// devices are scrubbed after its result is recorded.
func waitFree(t *testing.T, alloc *gpu.Allocator, n int64) {
	t.Helper()
	for i := 0; alloc.Free() != n; i++ {
		if i == 3000 {
			t.Fatalf("%d devices free, want %d: %+v", alloc.Free(), n, alloc.Snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
