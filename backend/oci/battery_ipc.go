package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// guest runs the prober in s with lim and returns the result and report.
func guest(ctx context.Context, s *Sandbox, t battery.Target, lim sandbox.Limits, args ...string) (*sandbox.Result, prober.Report, error) {
	if lim.Wall == 0 {
		lim.Wall = 20 * time.Second
	}
	inv := &sandbox.Invocation{Tenant: "wovyr-battery", Policy: sandbox.Policy{Trust: sandbox.Trusted}, Limits: lim,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: t.Image, Argv: append(append([]string{}, t.Guest...), args...)}}
	res, err := s.Run(ctx, inv)
	var rep prober.Report
	if err != nil {
		return nil, rep, err
	}
	lines := bytes.Split(bytes.TrimSpace(res.Stdout), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &rep); err != nil || rep.Probe == "" {
		return res, rep, fmt.Errorf("no probe report (class %s, stderr %.200q)", res.Class, res.Stderr)
	}
	return res, rep, nil
}

// whileHolding runs args in sandbox a in the background, waits until it
// writes "ready" in its workspace, runs then() and waits for a.
func whileHolding(ctx context.Context, a *Sandbox, t battery.Target, lim sandbox.Limits, then func(), args ...string) (prober.Report, error) {
	type out struct {
		rep prober.Report
		err error
	}
	done := make(chan out, 1)
	go func() {
		_, rep, err := guest(ctx, a, t, lim, args...)
		done <- out{rep, err}
	}()
	ready := filepath.Join(a.dir, "rootfs", workDir, "ready")
	for {
		if _, err := os.Stat(ready); err == nil {
			then()
			o := <-done
			return o.rep, o.err
		}
		select {
		case o := <-done:
			if o.err == nil {
				o.err = fmt.Errorf("finished without getting ready: %v", o.rep)
			}
			return o.rep, o.err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func twoSandboxes(ctx context.Context, t battery.Target) (*Sandbox, *Sandbox, func(), error) {
	a, err := prepared(ctx, t)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := prepared(ctx, t)
	if err != nil {
		a.Destroy(context.WithoutCancel(ctx))
		return nil, nil, nil, err
	}
	return a, b, func() {
		a.Destroy(context.WithoutCancel(ctx))
		b.Destroy(context.WithoutCancel(ctx))
	}, nil
}

// probeIPC is row 46: tenant A creates a SysV segment, queue and semaphore
// set, a /dev/shm file and a POSIX message queue; tenant B, while A holds
// them, must see none of them.
func probeIPC(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "A creates SysV shm/msg/sem, /dev/shm file, mqueue under one marker; B looks them up meanwhile"}
	a, b, done, err := twoSandboxes(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer done()
	mark := "wovyr-mark-ipc-" + sandbox.NewID()[:12]
	var seen prober.Report
	var berr error
	put, err := whileHolding(ctx, a, t, sandbox.Limits{}, func() {
		_, seen, berr = guest(ctx, b, t, sandbox.Limits{}, "ipcget", mark)
	}, "ipcput", mark, "2000")
	if err == nil {
		err = berr
	}
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	obs.Observed = fmt.Sprintf("A created %d/5 %v; B sees %d %v", put.Count, put.Data, seen.Count, seen.Data)
	obs.Secure = put.Count == 5 && seen.Count == 0
	return obs
}

// probeKernelObjects is row 56: with nofile=64, tenant A's pipes, inotify
// instances and message queues each stop at a limit (an errno, within the
// budget); tenant B, measured while A holds all it can, gets exactly as
// many — A's growth is charged to A alone.
func probeKernelObjects(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "nofile=64: A grows pipes, inotify, mqueue to its limits and holds them; B grows the same meanwhile"}
	a, b, done, err := twoSandboxes(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer done()
	lim := sandbox.Limits{NoFile: 64}
	var bRep prober.Report
	var berr error
	aRep, err := whileHolding(ctx, a, t, lim, func() {
		_, bRep, berr = guest(ctx, b, t, lim, "kgrow", "300")
	}, "kgrow", "300", "2000")
	if err == nil {
		err = berr
	}
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	obs.Observed = fmt.Sprintf("A %v; B %v", aRep.Data, bRep.Data)
	obs.Secure = true
	for _, k := range []string{"pipes", "inotify", "mqueue"} {
		if aRep.Data[k+"_errno"] == "" || atoi(aRep.Data[k]) > 64 || bRep.Data[k] != aRep.Data[k] {
			obs.Secure = false
		}
	}
	return obs
}

// probeThreads is row 57: with pids=64 a thread bomb is refused by the
// kernel (the Go runtime aborts on EAGAIN) long before 2000 threads. Under
// gVisor the budget is the whole sandbox's: the bomb exhausts it, the
// agent itself cannot get a thread and the sandbox ends — the limit held,
// for that sandbox alone.
func probeThreads(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "pids=64: start 2000 parked OS threads"}
	s, err := prepared(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	res, rep, err := guest(ctx, s, t, sandbox.Limits{Pids: 64, Wall: 30 * time.Second}, "threads", "2000")
	if res == nil && s.b.gvisor && err != nil && strings.Contains(err.Error(), "lost its agent") {
		obs.Observed = "the sandbox ended at its pids budget: " + err.Error()
		obs.Secure = true
		return obs
	}
	if res == nil {
		obs.Observed = err.Error()
		return obs
	}
	refused := strings.Contains(string(res.Stderr), "failed to create new OS thread")
	obs.Observed = fmt.Sprintf("class=%s exit=%d threads=%d stderr %.160q", res.Class, res.ExitCode, rep.Count, firstLine(res.Stderr))
	obs.Secure = err != nil && refused && rep.Count == 0
	return obs
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
