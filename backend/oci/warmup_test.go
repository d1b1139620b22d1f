package oci

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestWarmUp: with Config.Pooled, Prepare runs the template's shell once
// before returning (logged with its exit status); a template without a
// shell still prepares, its warm-up failing harmlessly; the claimed run
// works as usual and nothing is left behind.
func TestWarmUp(t *testing.T) {
	for name, mk := range map[string]func(Config) (*Backend, error){"container": NewContainer, "gvisor": NewGVisor} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := testConfig(t)
			cfg.Pooled = true
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			b, err := mk(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if c := b.Probe(ctx); !c.Available {
				t.Skip(c.Reason)
			}
			empty, remove, err := rawTemplate(b, []string{"bin"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer remove()
			for _, tc := range []struct{ image, exit string }{{"busybox", "exit=0"}, {empty, "exit=127"}} {
				logs.Reset()
				res, _ := runID(t, b, &sandbox.Invocation{Tenant: "acme",
					Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: tc.image, Argv: []string{"/bin/sh", "-c", "echo hi"}},
					Policy:   sandbox.Policy{Trust: sandbox.Untrusted}})
				var warm string
				for _, l := range strings.Split(logs.String(), "\n") {
					if strings.Contains(l, "msg=warm-up") {
						warm = l
					}
				}
				if !strings.Contains(warm, tc.exit) {
					t.Errorf("%s: want a warm-up log with %s, got %q", tc.image, tc.exit, warm)
				}
				want := "hi\n"
				if tc.image == empty {
					want = ""
				}
				if string(res.Stdout) != want {
					t.Errorf("%s: stdout %q, want %q (exit %d, %s)", tc.image, res.Stdout, want, res.ExitCode, res.Stderr)
				}
			}
		})
	}
}
