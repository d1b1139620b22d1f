package microvm

import (
	"context"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sandbox/sandboxtest"
)

// TestSelfTracingJob is issue #25 item 1's reproducer in a microVM: a
// leader that calls PTRACE_TRACEME and then takes a signal hit its
// deadline with no output; it must keep its exit code (7) and its output.
func TestSelfTracingJob(t *testing.T) {
	b := backend(t)
	data := sandboxtest.Traceme(t)
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/sh", "-c", "chmod +x tool && exec ./tool")
	in.Workload.Files = []sandbox.File{{Path: "tool", Data: data, Mode: 0o755}}
	in.Limits.Wall = 30 * time.Second
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if want := "traceme errno=0\ngot SIGUSR1\n"; res.Class != sandbox.OK || res.ExitCode != 7 || string(res.Stdout) != want {
		t.Fatalf("class %q (%s), exit %d, stdout %q, stderr %q; want exit 7 and %q", res.Class, res.Error, res.ExitCode, res.Stdout, res.Stderr, want)
	}
}
