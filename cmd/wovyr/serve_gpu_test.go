package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/internal/ordertest"
	"github.com/wovyr/wovyr/sandbox"
)

// TestServeGPUFakeInventory is issue #18's end to end through the real
// daemon: `wovyr serve` with "gpu": {"inventory": "fake"} (two made-up
// GPUs) on this node's backends. An untrusted tenant's GPU invocation is
// refused, 409 floor-unmet, with each backend at its floor's reason (here
// gVisor's nvproxy without a driver, and a microVM without an image in the
// test's state dir; its VFIO reasons are backend/microvm's tests); a
// trusted one runs with exactly its assigned fake device named, whatever
// it asked for; max_gpus and capacity are enforced (400); and three
// tenants of weights 2, 1 and 1 queued behind a blocker holding both
// devices start in weighted round-robin, one 2-GPU task at a time, with
// the devices' metrics showing their holder.
func TestServeGPUFakeInventory(t *testing.T) {
	wovyr, state := certifiedNative(t, "wovyr-gpu-serve-test-")
	tenant := func(name string, weight, maxGPUs int, admin bool) string {
		return fmt.Sprintf(`{"name": %q, "weight": %d, "max_gpus": %d, "admin": %v, "token_sha256": [%q]}`, name, weight, maxGPUs, admin, config.HashToken(name+"-token"))
	}
	conf := `{"cgroup_reconcile": "owned", "concurrency": 8,
		"gpu": {"inventory": "fake", "fake": {"count": 2, "memory_bytes": 17179869184}},
		"tenants": [` + strings.Join([]string{tenant("ta", 2, 0, true), tenant("tb", 1, 0, false), tenant("tc", 1, 0, false),
		tenant("tq", 1, 1, false), tenant("tz", 1, 0, false)}, ", ") + `]}`
	d := startDaemonConfig(t, wovyr, state, conf)
	cl := func(name string) *client.Client { return client.New(d.url, name+"-token", nil) }
	ctx := context.Background()
	inv := func(trust sandbox.TrustClass, gpus int64, argv ...string) *sandbox.Invocation {
		v := &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv,
			Env: []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0,1"}},
			Policy: sandbox.Policy{Trust: trust}}
		v.Resources.GPU = gpus
		return v
	}

	var ce *client.Error
	_, err := cl("tb").Run(ctx, inv(sandbox.Untrusted, 1, "true"))
	want := "floor-unmet: no usable backend at or above gvisor for a command workload; " +
		"gvisor: no GPUs: runsc nvproxy unavailable: no NVIDIA driver on this node; microvm: not available on this node"
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != sandbox.FloorUnmet || ce.Message != want {
		t.Fatalf("untrusted GPU invocation: %v\nwant 409 %s\n%s", err, want, d.log)
	}
	_, err = cl("tb").Run(ctx, inv(sandbox.Hostile, 1, "true"))
	want = "floor-unmet: no usable backend at or above microvm for a command workload; microvm: not available on this node"
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Message != want {
		t.Fatalf("hostile GPU invocation: %v\nwant 409 %s", err, want)
	}

	res, err := cl("tb").Run(ctx, inv(sandbox.Trusted, 1, "sh", "-c", `echo "$NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Backend != "native" || string(res.Stdout) != "GPU-fake-0 GPU-fake-0\n" {
		t.Fatalf("trusted GPU invocation on %s printed %q, want native and its assigned device only", res.Backend, res.Stdout)
	}

	_, err = cl("tq").Run(ctx, inv(sandbox.Trusted, 2, "true"))
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Message != "bad-input (resources): task demands 2 GPUs, tenant tq may hold 1" {
		t.Fatalf("2 GPUs over tq's max_gpus of 1: %v", err)
	}
	_, err = cl("tb").Run(ctx, inv(sandbox.Trusted, 3, "true"))
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(ce.Message, "exceeds capacity") || !strings.Contains(ce.Message, "gpu=2}") {
		t.Fatalf("3 GPUs on a 2-GPU node: %v", err)
	}

	// Fairness: a blocker holds both devices until the gate opens.
	order := ordertest.New(t)
	blocker, err := cl("tz").Submit(ctx, inv(sandbox.Trusted, 2, "sh", "-c", order.Blocker()), 0)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, cl("tz"), blocker.ID, client.StateRunning)
	if m := metrics(t, d); !strings.Contains(m, `wovyr_gpu_in_use{device="GPU-fake-0",tenant="tz"} 1`) || !strings.Contains(m, `wovyr_gpu_in_use{device="GPU-fake-1",tenant="tz"} 1`) {
		t.Fatalf("metrics while tz holds both devices:\n%s", m)
	}
	var ids []string
	for range 4 {
		for _, tn := range []string{"ta", "tb", "tc"} {
			rec, err := cl(tn).Submit(ctx, inv(sandbox.Trusted, 2, "sh", "-c", order.Record(tn)), 0)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, tn+"/"+rec.ID)
		}
	}
	for _, id := range ids {
		tn, id, _ := strings.Cut(id, "/")
		waitState(t, cl(tn), id, client.StateQueued)
	}
	order.Open(t)
	var wg sync.WaitGroup
	for _, id := range append(ids, "tz/"+blocker.ID) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, id, _ := strings.Cut(id, "/")
			if rec, err := cl(tn).Get(ctx, id, 60*time.Second); err != nil || rec.State != client.StateDone {
				t.Errorf("%s %s: %v %+v", tn, id, err, rec)
			}
		}()
	}
	wg.Wait()
	order.Want(t, "ta tb tc ta ta tb tc ta tb tc tb tc")
	for i := 0; ; i++ {
		m := metrics(t, d)
		if !strings.Contains(m, "wovyr_gpu_in_use{") && strings.Contains(m, `wovyr_gpu_quarantined{device="GPU-fake-1"} 0`) {
			break
		}
		if i == 500 {
			t.Fatalf("devices not freed after the runs:\n%s", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState waits until invocation id is in state.
func waitState(t *testing.T, c *client.Client, id, state string) {
	t.Helper()
	for i := 0; ; i++ {
		rec, err := c.Get(context.Background(), id, 0)
		if err == nil && rec.State == state {
			return
		}
		if i == 1000 {
			t.Fatalf("invocation %s never %s: %+v %v", id, state, rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metrics is the daemon's GPU metric lines (ta is admin).
func metrics(t *testing.T, d *daemon) string {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer ta-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "wovyr_gpu") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
