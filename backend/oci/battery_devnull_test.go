package oci

import (
	"context"
	"testing"
	"time"
)

// TestDevNullAttempt runs CVE-2025-31133's /dev/null redirection on each
// runtime directly (below wovyr's /dev tmpfs) and checks the outcome the
// ADR records: crun and runsc hold; the packaged runc 1.1.5 follows the
// symlink and truncates the host file (fixed upstream in 1.2.8), so the
// container backend on it stays uncertified (row 16, knownFailures).
func TestDevNullAttempt(t *testing.T) {
	for name, b := range batteryBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d, err := b.chosen(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got, held := devNullAttempt(ctx, b, d)
			_, vulnerable := knownFailures[d.version][16]
			if held == vulnerable {
				t.Fatalf("%s: held=%v, known vulnerable=%v: %s", d.version, held, vulnerable, got)
			}
			t.Logf("%s: held=%v: %s", d.version, held, got)
		})
	}
}
