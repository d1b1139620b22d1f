package oci

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestSessionExecStreams: a session's exec reports its output live
// (sandbox.WithOutput), held to the exec's cap, and its result holds the
// same bytes the stream sent. On runc/crun the command waits for a file
// the host writes into its workspace only once the first piece arrived:
// output held to the end would time the exec out instead.
func TestSessionExecStreams(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			s := openSession(t, b)
			gate := !b.gvisor // the Sentry caches the workspace: the host's write is not seen
			script := `echo first; echo warn >&2; echo second-past-the-cap`
			if gate {
				script = `echo first; echo warn >&2; while [ ! -e go ]; do sleep 0.01; done; echo second-past-the-cap`
			}
			var mu sync.Mutex
			var out, errs strings.Builder
			opened := false
			ctx := sandbox.WithOutput(context.Background(), func(c sandbox.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				map[sandbox.Stream]*strings.Builder{sandbox.Stdout: &out, sandbox.Stderr: &errs}[c.Stream].Write(c.Data)
				if gate && !opened && strings.HasPrefix(out.String(), "first\n") {
					opened = true
					if err := os.WriteFile(filepath.Join(s.dir, "rootfs", workDir, "go"), nil, 0o644); err != nil {
						t.Error(err)
					}
				}
			})
			res, err := s.Exec(ctx, &sandbox.Exec{Argv: []string{"sh", "-c", script}, Output: 12})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Class != sandbox.OK || res.ExitCode != 0 {
				t.Fatalf("exec: %+v (gate opened: %v)", res, opened)
			}
			if string(res.Stdout) != "first\nsecond" || !res.StdoutTruncated || string(res.Stderr) != "warn\n" {
				t.Fatalf("result %q %q truncated %v", res.Stdout, res.Stderr, res.StdoutTruncated)
			}
			if out.String() != string(res.Stdout) || errs.String() != string(res.Stderr) {
				t.Fatalf("streamed %q %q, result %q %q", out.String(), errs.String(), res.Stdout, res.Stderr)
			}
			// Without an observer the exec answers as before.
			if res := execOK(t, s, sandbox.Exec{Argv: []string{"echo", "plain"}}); string(res.Stdout) != "plain\n" {
				t.Fatalf("plain exec: %q", res.Stdout)
			}
		})
	}
}

// TestOneShotRunStreams: a one-shot invocation run as the container's init
// (the runtime's stdio is the workload's) streams what its caps keep, the
// same bytes as its result.
func TestOneShotRunStreams(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var out, errs strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "busybox"})
			if err != nil {
				t.Fatal(err)
			}
			s := sb.(*Sandbox)
			live := sandbox.WithOutput(ctx, func(c sandbox.Chunk) {
				mu.Lock()
				defer mu.Unlock()
				map[sandbox.Stream]*strings.Builder{sandbox.Stdout: &out, sandbox.Stderr: &errs}[c.Stream].Write(c.Data)
			})
			res, err := sb.Run(live, &sandbox.Invocation{ID: "live1", Tenant: "acme", Policy: sandbox.Policy{Trust: sandbox.Trusted},
				Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: "busybox", Argv: []string{"sh", "-c", "echo a; echo b >&2; echo c; exit 3"}},
				Limits:   sandbox.Limits{Output: 3}})
			if derr := sb.Destroy(ctx); derr != nil {
				t.Error(derr)
			}
			assertNoLeftovers(t, b, s)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if res.ExitCode != 3 || string(res.Stdout) != "a\nc" || string(res.Stderr) != "b\n" {
				t.Fatalf("result %+v", res)
			}
			if out.String() != string(res.Stdout) || errs.String() != string(res.Stderr) {
				t.Fatalf("streamed %q %q, result %q %q", out.String(), errs.String(), res.Stdout, res.Stderr)
			}
		})
	}
}
