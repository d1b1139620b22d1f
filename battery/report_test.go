package battery

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
)

// TestWriteMarkdownRuntimes: a backend certified on two runtimes gets a
// column per runtime (its newest record of each), a backend on one runtime
// a plain column.
func TestWriteMarkdownRuntimes(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec := func(backend, version string, at time.Time, pass bool) cert.Record {
		return cert.Record{Key: cert.Key{Backend: backend, RuntimeVersion: version, Kernel: "k", ConfigHash: "h"}, At: at,
			Passed: pass, Outcomes: []cert.Outcome{{ID: 19, Name: "CVE-2024-21626", Applies: true, Pass: pass, ControlFlagged: true}}}
	}
	var buf bytes.Buffer
	WriteMarkdown(&buf, []cert.Record{
		rec("gvisor", "runsc version 0.0~20240729.0", at, true),
		rec("container", "runc version 1.1.5+ds1", at, false),
		rec("container", "runc version 1.1.5+ds1", at.Add(time.Hour), true),
		rec("container", "crun version 1.8.1", at, true),
	})
	out := buf.String()
	if want := "| # | probe | container (crun) | container (runc) | gvisor |\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("header: got %q, want prefix %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	if want := "| 19 | CVE-2024-21626 | PASS | PASS | PASS |\n"; !strings.Contains(out, want) {
		t.Errorf("row 19: want %q (the newest runc record) in\n%s", want, out)
	}
	if n := strings.Count(out, "- **container**"); n != 2 {
		t.Errorf("%d container summaries, want 2 (one per runtime)", n)
	}
}

// TestWriteMarkdownEgress: a configuration with allowlisted egress keeps a
// column of its own beside the same backend without it, so certifying one
// never hides the other.
func TestWriteMarkdownEgress(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec := func(egress bool, at time.Time, pass bool) cert.Record {
		return cert.Record{Key: cert.Key{Backend: "microvm", RuntimeVersion: "QEMU emulator version 7.2.15", Kernel: "k", ConfigHash: "h"}, At: at, Egress: egress,
			Passed: pass, Outcomes: []cert.Outcome{{ID: 72, Name: "metadata", Applies: egress, Pass: pass, ControlFlagged: true}}}
	}
	var buf bytes.Buffer
	WriteMarkdown(&buf, []cert.Record{rec(true, at, true), rec(false, at.Add(time.Hour), true), rec(true, at.Add(-time.Hour), false)})
	out := buf.String()
	if want := "| # | probe | microvm | microvm (egress) |\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("header: got %q, want prefix %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	var row72 string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| 72 | ") {
			row72 = l
		}
	}
	if want := "| n/a | PASS |"; !strings.HasSuffix(row72, want) {
		t.Errorf("row 72: got %q, want the suffix %q (without egress, then the newest egress record)", row72, want)
	}
	if !strings.Contains(out, "- **microvm** with allowlisted egress (") {
		t.Errorf("no egress summary in\n%s", out)
	}
}

// TestWriteMarkdownUnprivileged: wasm certified without root keeps a column
// of its own beside root's (issue #26), its workspace rows n/a.
func TestWriteMarkdownUnprivileged(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec := func(unpriv bool, at time.Time) cert.Record {
		return cert.Record{Key: cert.Key{Backend: "wasm", RuntimeVersion: "wasmtime 39.0.1", Kernel: "k", ConfigHash: "h"}, At: at, Unprivileged: unpriv,
			Passed: true, Outcomes: []cert.Outcome{{ID: 52, Name: "disk", Applies: !unpriv, Pass: !unpriv, ControlFlagged: true}}}
	}
	var buf bytes.Buffer
	WriteMarkdown(&buf, []cert.Record{rec(true, at.Add(time.Hour)), rec(false, at)})
	out := buf.String()
	if want := "| # | probe | wasm | wasm (unprivileged) |\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("header: got %q, want prefix %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	if want := "| 52 | Disk | PASS | n/a |\n"; !strings.Contains(out, want) {
		t.Errorf("row 52: want %q in\n%s", want, out)
	}
	if !strings.Contains(out, "- **wasm** without root (") {
		t.Errorf("no unprivileged summary in\n%s", out)
	}
}
