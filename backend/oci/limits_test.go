package oci

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// TestForkBombStopsAtPidsLimit: a workload allowed 32 processes gets
// exactly 32, its shell and 31 sleepers, in both modes. A pooled sandbox's
// agent shares the sandbox's user, whose tasks RLIMIT_NPROC counts; its
// threads must come out of neither the workload's budget (they did: a
// pooled workload got 24–25) nor, while the workload holds it all, be
// refused (the Go runtime dies when it cannot start a thread).
func TestForkBombStopsAtPidsLimit(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", `grep Threads: /proc/1/status; i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done`)
			// The wall only bounds the test: 169 refused forks take gVisor
			// over 20 s on a loaded machine (make test, 2 cores).
			inv.Limits = sandbox.Limits{Pids: 32, Wall: 90 * time.Second}
			res := run(t, b, inv)
			if res.Class != sandbox.OK {
				t.Fatalf("class %q: %s", res.Class, res.Error)
			}
			lines := strings.Fields(string(res.Stdout))
			if len(lines) < 2 || lines[len(lines)-1] != "31" {
				t.Fatalf("want 31 sleepers beside the shell, got %q (exit %d, stderr %q)", res.Stdout, res.ExitCode, res.Stderr)
			}
			if !strings.Contains(string(res.Stderr), "can't fork") {
				t.Errorf("want a fork failure on stderr, got %q", res.Stderr)
			}
			if threads, _ := strconv.Atoi(lines[1]); strings.HasSuffix(name, "-pooled") && (threads < 2 || threads > agent.ThreadReserve) {
				t.Errorf("the agent (pid 1) has %s threads, want 2..%d", lines[1], agent.ThreadReserve)
			}
		})
	}
}

func TestMemoryHogIsOOM(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			// 300 MB of distinct pages under a 64 MB limit.
			inv := cmd("/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1")
			inv.Limits = sandbox.Limits{Memory: 64 << 20, Wall: 60 * time.Second}
			res := run(t, b, inv)
			t.Logf("exit=%d sig=%q class=%q err=%s peak=%d", res.ExitCode, res.Signal, res.Class, res.Error, res.Usage.PeakMemory)
			if res.Class != sandbox.OOM {
				t.Fatalf("class %q, want oom (exit %d, stdout %.100s)", res.Class, res.ExitCode, res.Stdout)
			}
		})
	}
}

// TestMemoryLimitIsTheWorkloads pins issue #25 item 7: a job peaking at
// 53 MB passed --memory 64M on container and was OOM-killed on gVisor,
// whose Sentry the cgroup counted against the tenant's limit.
func TestMemoryLimitIsTheWorkloads(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=53M", "count=1")
			inv.Limits = sandbox.Limits{Memory: 64 << 20, Wall: 60 * time.Second}
			res := run(t, b, inv)
			if res.Class != sandbox.OK || res.ExitCode != 0 {
				t.Fatalf("class %q (%s), exit %d, stderr %q: want a clean run", res.Class, res.Error, res.ExitCode, res.Stderr)
			}
		})
	}
}

func TestCPUSpinKilledAtDeadline(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", `while :; do :; done`)
			inv.Limits = sandbox.Limits{Wall: 1500 * time.Millisecond}
			res := run(t, b, inv)
			if res.Class != sandbox.Timeout {
				t.Fatalf("class %q, want timeout (exit %d)", res.Class, res.ExitCode)
			}
			if res.Usage.Wall < 1500*time.Millisecond {
				t.Errorf("killed after %s, before the 1.5s deadline", res.Usage.Wall)
			}
		})
	}
}

func TestCPULimitIsTimeout(t *testing.T) {
	all := newBackendsBothModes(t)
	for _, name := range []string{"container", "container-pooled"} {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", `while :; do :; done`)
			inv.Limits = sandbox.Limits{Wall: 20 * time.Second, CPU: 300 * time.Millisecond}
			res := run(t, all[name], inv)
			if res.Class != sandbox.Timeout || !strings.Contains(res.Error, "CPU") {
				t.Fatalf("class %q (%s), want a CPU-limit timeout", res.Class, res.Error)
			}
		})
	}
}

func TestRlimitsPerInvocation(t *testing.T) {
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", "ulimit -n; ulimit -f; ulimit -c")
			inv.Limits = sandbox.Limits{NoFile: 64, Disk: 8 << 20}
			res := run(t, b, inv)
			// ulimit -f counts 512-byte blocks.
			if got := string(res.Stdout); got != "64\n16384\n0\n" {
				t.Fatalf("limits inside: %q (stderr %q), want 64, 16384, 0", got, res.Stderr)
			}
		})
	}
}

// TestLimitsAboveTemplate: a claim for more memory than the template's
// shape gets it — the runtime's own cgroup, which carries the template's
// limit, is lifted and the sandbox's enforces the claim — and the claimed
// limit still holds.
func TestLimitsAboveTemplate(t *testing.T) {
	tmpl := sandbox.Limits{}.WithDefaults()
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			// 320 MB in one buffer: over the template's 256 MB, under the claim's 512.
			fits := cmd("/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=320M", "count=1")
			fits.Limits = sandbox.Limits{Memory: 2 * tmpl.Memory, Wall: 60 * time.Second}
			if res := run(t, b, fits); res.Class != sandbox.OK || res.ExitCode != 0 {
				t.Fatalf("320 MB under a 512 MB claim: class %q exit %d (%s) stderr %.200s", res.Class, res.ExitCode, res.Error, res.Stderr)
			}
			over := cmd("/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=600M", "count=1")
			over.Limits = fits.Limits
			if res := run(t, b, over); res.Class != sandbox.OOM {
				t.Fatalf("600 MB under a 512 MB claim: class %q exit %d, want oom", res.Class, res.ExitCode)
			}
		})
	}
}

// TestRlimitsAboveTemplate: a claim for more open files, file size and
// processes than the template's gets them in both modes — a pooled
// sandbox's agent cannot raise its own hard limits, so its spec starts it
// with room above the template's (rlimitCeilings).
func TestRlimitsAboveTemplate(t *testing.T) {
	tmpl := sandbox.Limits{}.WithDefaults()
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", "ulimit -n; ulimit -f")
			inv.Limits = sandbox.Limits{NoFile: 2 * tmpl.NoFile, Disk: 2 * tmpl.Disk, Pids: 2 * tmpl.Pids}
			res := run(t, b, inv)
			want := fmt.Sprintf("%d\n%d\n", 2*tmpl.NoFile, 2*tmpl.Disk/512) // ulimit -f counts 512-byte blocks
			if res.Class != sandbox.OK || string(res.Stdout) != want {
				t.Fatalf("class %q exit %d stdout %q stderr %q; want %q", res.Class, res.ExitCode, res.Stdout, res.Stderr, want)
			}
		})
	}
}
