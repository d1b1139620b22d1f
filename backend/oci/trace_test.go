package oci

import (
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sandbox/sandboxtest"
)

// TestSelfTracingJob is issue #25 item 1's reproducer on container and
// gVisor, one-shot and pooled: a static Go tool, given as a file, whose
// leader calls PTRACE_TRACEME, sends itself SIGUSR1, prints and exits 7.
// It ended with exit code -1 and cut output (container) or a sandbox that
// no longer answered (gVisor).
func TestSelfTracingJob(t *testing.T) {
	data := sandboxtest.Traceme(t)
	for name, b := range newBackendsBothModes(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", "chmod +x tool && exec ./tool")
			inv.Workload.Files = []sandbox.File{{Path: "tool", Data: data, Mode: 0o755}}
			inv.Limits.Wall = 30 * time.Second
			res := run(t, b, inv)
			if want := "traceme errno=0\ngot SIGUSR1\n"; res.Class != sandbox.OK || res.ExitCode != 7 || string(res.Stdout) != want {
				t.Fatalf("class %q (%s), exit %d, stdout %q, stderr %q; want exit 7 and %q", res.Class, res.Error, res.ExitCode, res.Stdout, res.Stderr, want)
			}
		})
	}
}
