package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

func TestProbeRunsATinyModule(t *testing.T) {
	b := newBackend(t)
	c := b.Probe(context.Background())
	if !c.Available || c.Reason != "" {
		t.Fatalf("probe: %+v", c)
	}
	if c.Egress || !slices.Contains(c.Features, "no-sockets") || c.Version != "wasmtime 39.0.1" || c.ConfigHash == "" {
		t.Fatalf("capability: %+v", c)
	}
}

func TestSpinStopsAtDeadlineAsTimeout(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "wat/spin"), "spin")
	in.Limits.Wall = 200 * time.Millisecond
	res := run(t, b, in)
	if res.Class != sandbox.Timeout || res.Signal != "killed" {
		t.Fatalf("class %q signal %q error %q", res.Class, res.Signal, res.Error)
	}
	// It ends on the first tick after the deadline; the bound here is loose
	// because the machine is shared (BenchmarkDeadlineOvershoot measures it).
	if res.Usage.Wall < in.Limits.Wall || res.Usage.Wall > in.Limits.Wall+time.Second {
		t.Fatalf("wall %s for a %s deadline", res.Usage.Wall, in.Limits.Wall)
	}
}

func TestGoSpinStopsAtDeadline(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "goguest"), "goguest", "spin")
	in.Limits.Wall = 300 * time.Millisecond
	if res := run(t, b, in); res.Class != sandbox.Timeout {
		t.Fatalf("class %q error %q", res.Class, res.Error)
	}
}

func TestFuelExhaustionIsOutOfFuel(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "wat/spin"), "spin")
	in.Limits.Fuel = 1_000_000
	res := run(t, b, in)
	if res.Class != sandbox.OutOfFuel || res.Usage.Fuel != in.Limits.Fuel {
		t.Fatalf("class %q fuel %d error %q", res.Class, res.Usage.Fuel, res.Error)
	}
}

func TestFuelIsReportedOnSuccess(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "c/hello"), "hello")
	in.Limits.Fuel = 10_000_000
	res := run(t, b, in)
	if res.Class != sandbox.OK || res.Usage.Fuel == 0 || res.Usage.Fuel >= in.Limits.Fuel {
		t.Fatalf("class %q fuel %d", res.Class, res.Usage.Fuel)
	}
}

func TestMemoryGrowFailsAtLimit(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "wat/grow"), "grow")
	in.Limits.Memory = 1 << 20 // 16 pages
	res := run(t, b, in)
	if res.ExitCode != 16 || res.Usage.PeakMemory != 1<<20 {
		t.Fatalf("exit %d (pages reached) peak %d, want 16 and 1 MiB: %s", res.ExitCode, res.Usage.PeakMemory, res.Error)
	}
}

func TestCMemoryHogFailsAllocationAtLimit(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "c/hog"), "hog")
	in.Limits.Memory = 16 << 20
	res := run(t, b, in)
	var n int
	if _, err := fmtSscanf(string(res.Stdout), "allocated %d MiB", &n); err != nil {
		t.Fatalf("stdout %q: %v (%+v)", res.Stdout, err, res)
	}
	if n < 12 || n > 16 || res.ExitCode != 12 || res.Class != sandbox.OOM {
		t.Fatalf("allocated %d MiB under a 16 MiB limit, exit %d class %q", n, res.ExitCode, res.Class)
	}
	if res.Usage.PeakMemory > in.Limits.Memory {
		t.Fatalf("peak %d over the limit", res.Usage.PeakMemory)
	}
}

func TestGoMemoryHogDiesAsOOM(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "goguest"), "goguest", "alloc")
	in.Limits.Memory = 64 << 20
	res := run(t, b, in)
	if res.Class != sandbox.OOM || res.ExitCode == 0 || res.Usage.PeakMemory > in.Limits.Memory {
		t.Fatalf("class %q exit %d peak %d stderr tail %q", res.Class, res.ExitCode, res.Usage.PeakMemory, tail(res.Stderr))
	}
	if !bytes.Contains(res.Stderr, []byte("out of memory")) {
		t.Fatalf("the Go runtime did not report an allocation failure: %q", tail(res.Stderr))
	}
}

func TestArgsAndEnvExactlyAsGiven(t *testing.T) {
	b := newBackend(t)
	argv := []string{"prog-name", "args", "two words", "", "ünï", "--flag=x"}
	in := inv(guest(t, "goguest"), argv...)
	res := run(t, b, in)
	var got []string
	if err := json.Unmarshal(res.Stdout, &got); err != nil || !slices.Equal(got, argv) {
		t.Fatalf("argv %q (err %v), want %q", got, err, argv)
	}
	env := []string{"A=1", "EMPTY=", "WITH_EQ=a=b", "PATH=/nowhere"}
	in = inv(guest(t, "goguest"), "g", "env")
	in.Workload.Env = env
	res = run(t, b, in)
	if err := json.Unmarshal(res.Stdout, &got); err != nil || !slices.Equal(got, env) {
		t.Fatalf("env %q (err %v), want %q", got, err, env)
	}
	in.Workload.Env = nil
	res = run(t, b, in)
	if strings.TrimSpace(string(res.Stdout)) != "[]" {
		t.Fatalf("empty env leaked %q", res.Stdout)
	}
}

func TestDotDotOutOfPreopenIsDenied(t *testing.T) {
	b := newBackend(t)
	// A canary beside the workspace: one ".." away from /workspace on the host.
	plantCanary(t, b)
	for _, p := range []string{"/workspace/../canary", "/workspace/a/../../canary", "/workspace/../../../etc/passwd", "/etc/passwd", "../canary"} {
		in := inv(guest(t, "goguest"), "g", "cat", p)
		in.Workload.Files = []sandbox.File{{Path: "a/x", Data: []byte("x")}}
		res := run(t, b, in)
		if res.ExitCode != 1 || !strings.HasPrefix(string(res.Stdout), "ERR:") {
			t.Errorf("cat %s: exit %d stdout %q", p, res.ExitCode, res.Stdout)
		}
	}
}

func TestSymlinkOutOfPreopenIsNotFollowed(t *testing.T) {
	b := newBackend(t)
	canary := plantCanary(t, b)
	// The guest plants a link (WASI path_symlink) and then follows it.
	for _, target := range []string{"../canary", "/etc/passwd", canary} {
		in := inv(guest(t, "goguest"), "g", "symlink", target, "/workspace/link")
		in.Workload.Collect = []string{"link"}
		res := run(t, b, in)
		if len(res.Files) != 0 {
			t.Fatalf("collect followed the guest's link to %s: %q", target, res.Files[0].Data)
		}
		if res.ExitCode == 0 { // created: the host must not follow it either
			continue
		}
	}
	// A link the host placed (as a shared volume could hold) is not followed.
	ro := t.TempDir()
	os.Symlink(canary, filepath.Join(ro, "abs"))
	os.Symlink("../../../../../../../.."+canary, filepath.Join(ro, "rel"))
	b2 := newBackend(t, func(c *Config) { c.Preopens = []Preopen{{Host: ro, Guest: "/data"}} })
	for _, l := range []string{"/data/abs", "/data/rel"} {
		res := run(t, b2, inv(guest(t, "goguest"), "g", "cat", l))
		if res.ExitCode != 1 || bytes.Contains(res.Stdout, []byte("SECRET")) {
			t.Fatalf("cat %s: exit %d stdout %q", l, res.ExitCode, res.Stdout)
		}
	}
}

func TestReadOnlyPreopen(t *testing.T) {
	ro := t.TempDir()
	os.WriteFile(filepath.Join(ro, "data.txt"), []byte("shared data"), 0o644)
	b := newBackend(t, func(c *Config) { c.Preopens = []Preopen{{Host: ro, Guest: "/data"}} })
	res := run(t, b, inv(guest(t, "goguest"), "g", "cat", "/data/data.txt"))
	if string(res.Stdout) != "shared data" {
		t.Fatalf("read: %q", res.Stdout)
	}
	for _, p := range []string{"/data/data.txt", "/data/new.txt"} {
		res = run(t, b, inv(guest(t, "goguest"), "g", "write", p, "overwritten"))
		if res.ExitCode != 1 {
			t.Fatalf("write %s to a read-only preopen: exit %d %q", p, res.ExitCode, res.Stdout)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ro, "data.txt")); string(b) != "shared data" {
		t.Fatalf("host file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ro, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("new file created: %v", err)
	}
}

func TestFilesInAndCollectOut(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "goguest"), "g", "write", "/workspace/out/result.txt", "computed")
	in.Workload.Files = []sandbox.File{{Path: "out/input.txt", Data: []byte("in")}}
	in.Workload.Collect = []string{"out/result.txt", "out/input.txt", "missing.txt"}
	res := run(t, b, in)
	if res.ExitCode != 0 || len(res.Files) != 2 || string(res.Files[0].Data) != "computed" || string(res.Files[1].Data) != "in" {
		t.Fatalf("exit %d stdout %q files %+v: %s", res.ExitCode, res.Stdout, res.Files, res.Error)
	}
	left, _ := filepath.Glob(filepath.Join(b.work, "wovyr-wasm-*"))
	if len(left) != 0 {
		t.Fatalf("workspaces left behind: %v", left)
	}
}

func TestStdinAndOutputCap(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "goguest"), "g", "stdin")
	in.Workload.Stdin = []byte("from stdin")
	if res := run(t, b, in); string(res.Stdout) != "from stdin" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	in = inv(guest(t, "goguest"), "g", "flood", "10000000")
	in.Limits.Output = 4096
	res := run(t, b, in)
	if len(res.Stdout) != 4096 || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Fatalf("kept %d truncated %v exit %d", len(res.Stdout), res.StdoutTruncated, res.ExitCode)
	}
}

func TestInvalidModuleIsBadInputBeforeRunning(t *testing.T) {
	b := newBackend(t)
	for name, mod := range map[string][]byte{
		"garbage":    []byte("\x00asm\x01\x00\x00\x00garbage"),
		"not wasm":   []byte("#!/bin/sh\necho hi\n"),
		"bad import": mustWat(t, `(module (import "env" "host_fn" (func)) (func (export "_start")))`),
		"no _start":  mustWat(t, `(module (func (export "main")))`),
	} {
		sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
		_, err := sb.Run(context.Background(), inv(mod, "x"))
		if !errors.Is(err, sandbox.BadInput) {
			t.Errorf("%s: err %v, want bad-input", name, err)
		}
	}
}

func TestFreshInstancePerInvocation(t *testing.T) {
	b := newBackend(t)
	mod := guest(t, "wat/counter")
	for i := 0; i < 5; i++ {
		if res := run(t, b, inv(mod, "counter")); res.ExitCode != 17 {
			t.Fatalf("run %d exited %d: state carried over from an earlier invocation", i, res.ExitCode)
		}
	}
}

func TestCancelStopsTheGuest(t *testing.T) {
	b := newBackend(t)
	if err := b.started(); err != nil { // the ticker exists before the watcher reads it
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // cancel once the guest is executing
		for b.ticker.Running() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	sb, _ := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
	res, err := sb.Run(ctx, inv(guest(t, "wat/spin"), "spin"))
	if err != nil || res.Class != sandbox.Killed {
		t.Fatalf("err %v result %+v", err, res)
	}
}

func TestSandboxRunsOnce(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	sb, _ := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
	if _, err := sb.Run(ctx, inv(guest(t, "wat/tiny"), "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(ctx, inv(guest(t, "wat/tiny"), "t")); !errors.Is(err, sandbox.BackendFailure) {
		t.Fatalf("second run: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil || sb.Destroy(ctx) != nil {
		t.Fatal("destroy is not idempotent")
	}
	if _, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand}); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("prepare command: %v", err)
	}
}

func TestEgressAllowlistIsUnenforceable(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "wat/tiny"), "t")
	in.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "example.test", Ports: []uint16{443}}}}
	sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
	if _, err := sb.Run(context.Background(), in); !errors.Is(err, sandbox.Unenforceable) {
		t.Fatalf("err %v", err)
	}
}

func TestRandomAndClockAreReal(t *testing.T) {
	b := newBackend(t)
	r1 := run(t, b, inv(guest(t, "goguest"), "g", "random"))
	r2 := run(t, b, inv(guest(t, "goguest"), "g", "random"))
	if len(r1.Stdout) != 33 || bytes.Equal(r1.Stdout, r2.Stdout) {
		t.Fatalf("random %q %q", r1.Stdout, r2.Stdout)
	}
	res := run(t, b, inv(guest(t, "goguest"), "g", "time"))
	var ts int64
	if _, err := fmtSscanf(string(res.Stdout), "%d", &ts); err != nil || abs(ts-time.Now().Unix()) > 5 {
		t.Fatalf("guest clock %q vs host %d", res.Stdout, time.Now().Unix())
	}
}

func TestDiskAndInodeQuota(t *testing.T) {
	b := newBackend(t)
	in := inv(guest(t, "goguest"), "g", "fill", "/workspace/big")
	in.Workload.Files = []sandbox.File{{Path: "in", Data: []byte("x")}}
	in.Limits.Disk = 4 << 20
	res := run(t, b, in)
	var n int
	if _, err := fmtSscanf(string(res.Stdout), "wrote %d:", &n); err != nil || n > 4<<20 || n < 3<<20 || !bytes.Contains(res.Stdout, []byte("No space left")) {
		t.Fatalf("fill under a 4 MiB quota: %q", res.Stdout)
	}
	in = inv(guest(t, "goguest"), "g", "files", "/workspace")
	in.Workload.Collect = []string{"f0"}
	in.Limits.Disk = 1 << 20 // 256 inodes
	res = run(t, b, in)
	if _, err := fmtSscanf(string(res.Stdout), "created %d:", &n); err != nil || n > 256 || n < 200 {
		t.Fatalf("files under a 256-inode quota: %q", res.Stdout)
	}
}

func TestReconcileRemovesLeftovers(t *testing.T) {
	b := newBackend(t, func(c *Config) { c.StateDir = t.TempDir() })
	os.MkdirAll(filepath.Join(b.work, "wovyr-wasm-123", "sub"), 0o700)
	mounted := filepath.Join(b.work, "wovyr-wasm-456")
	os.Mkdir(mounted, 0o700)
	if err := syscall.Mount(mountSource, mounted, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mounted, "left"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(b.cfg.StateDir, "wasm", "cache", ".wovyr-tmp-9"), nil, 0o600)
	keep := filepath.Join(b.work, "not-ours")
	os.WriteFile(keep, nil, 0o600)
	n, err := b.Reconcile(context.Background())
	if err != nil || n != 4 { // one unmount, three removals
		t.Fatalf("removed %d: %v", n, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatal("reconcile removed something it does not own")
	}
}

// TestConcurrentInvocationsKeepTheirOwnOutput releases many goroutines at
// once; each must get exactly its own argv back on its own stdout.
func TestConcurrentInvocationsKeepTheirOwnOutput(t *testing.T) {
	b := newBackend(t)
	mod := guest(t, "c/hello")
	start := make(chan struct{})
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 20; i++ {
				want := fmt.Sprintf("hello tenant-%d run-%d", g, i)
				sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
				res, err := sb.Run(context.Background(), inv(mod, strings.Fields(want)...))
				sb.Destroy(context.Background())
				if err != nil || string(res.Stdout) != want+"\n" {
					errs <- fmt.Errorf("goroutine %d run %d: %v %q", g, i, err, res.Stdout)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPoolExhaustionIsBackendFailure(t *testing.T) {
	b := newBackend(t, func(c *Config) { c.Engine.PoolSlots = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *sandbox.Result, 1)
	go func() {
		// The spinner may lose the race for the only slot to a probe
		// below (BackendFailure): it tries again until it holds it, and
		// only the cancel below ends it.
		spin := inv(guest(t, "wat/spin"), "spin")
		spin.Limits.Wall = 10 * time.Minute
		for {
			sb, _ := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
			res, err := sb.Run(ctx, spin)
			if errors.Is(err, sandbox.BackendFailure) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
				continue
			}
			done <- res
			return
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for { // wait until the spinner holds the only slot
		sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
		_, err := sb.Run(context.Background(), inv(guest(t, "wat/tiny"), "t"))
		if err != nil {
			if !errors.Is(err, sandbox.BackendFailure) {
				t.Fatalf("err %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinner never held the pool's only slot")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if res := <-done; res == nil || res.Class != sandbox.Killed {
		t.Fatalf("spinner: %+v", res)
	}
}

func TestCloseWaitsForRunningInvocations(t *testing.T) {
	b, err := New(Config{StateDir: sharedState})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.started(); err != nil { // the ticker exists before the loop below reads it
		t.Fatal(err)
	}
	in := inv(guest(t, "wat/spin"), "spin")
	in.Limits.Wall = 300 * time.Millisecond
	done := make(chan *sandbox.Result)
	go func() {
		sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
		res, _ := sb.Run(context.Background(), in)
		done <- res
	}()
	for b.ticker.Running() == 0 { // until the guest is executing
		time.Sleep(time.Millisecond)
	}
	b.Close() // must not free the engine under the running guest
	if res := <-done; res == nil || res.Class != sandbox.Timeout {
		t.Fatalf("running invocation: %+v", res)
	}
	sb, _ := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindWasm})
	if _, err := sb.Run(context.Background(), inv(guest(t, "wat/tiny"), "t")); !errors.Is(err, sandbox.BackendFailure) {
		t.Fatalf("run after close: %v", err)
	}
}
