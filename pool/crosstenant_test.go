package pool

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wovyr/wovyr/autoscale"
	"github.com/wovyr/wovyr/sandbox"
)

// tenantBackend is one row of the cross-tenant test. Adding a backend is
// one line here (see crosstenant_backends_test.go).
type tenantBackend struct {
	name    string
	factory func(t *testing.T) Factory // may t.Skip when the runtime is absent
	// found is what B's scan must report; empty means nothing. Positive
	// controls (a lying reset, a destroy that is skipped) set it, proving
	// that the scan sees the canaries where they survive.
	found string
	// residue marks a control whose sandboxes outlive Close (their destroy
	// is deferred): the host check must then find the canary, proving it
	// looks where a missing destroy leaves state.
	residue bool
}

// plantScript runs as tenant A with SECRET=<canary> in its environment. It
// leaves the canary in workspace files, TMPDIR, the memory segment (where
// the sandbox has one), and a background process (argv and environ).
const plantScript = `set -e
echo "$SECRET" > canary.txt
mkdir -p sub && echo "$SECRET" > sub/deep
if [ -n "$TMPDIR" ]; then echo "$SECRET" > "$TMPDIR/canary"; fi
if [ -n "$WOVYR_MEM" ]; then printf '%s' "$SECRET" | dd of="$WOVYR_MEM" conv=notrunc 2>/dev/null; fi
sh -c 'while :; do sleep 1; done' "$SECRET" >/dev/null 2>&1 </dev/null &
echo planted`

// scanScript runs as tenant B. $1 is a pattern that matches the canary but
// does not contain it (wovyrcanar[y]…), so the scan never finds itself. It
// looks where an adversary would: its workspace, its environment, its
// memory segment, every /tmp/wovyr-* path — including workspaces it can
// only find through the mount table — and every process's argv and environ.
const scanScript = `P="$1"; found=""
grep -rqsa -e "$P" . && found="$found files"
env | grep -qa -e "$P" && found="$found env"
if [ -n "$WOVYR_MEM" ]; then grep -qsa -e "$P" "$WOVYR_MEM" && found="$found memory"; fi
mounts=$(while read -r _ mp _; do case "$mp" in /tmp/wovyr-*) echo "$mp";; esac; done </proc/self/mounts)
for d in /tmp/wovyr-* $mounts ${TMPDIR:+"$TMPDIR"}; do grep -rqsa -e "$P" "$d" && { found="$found tmp"; break; }; done
grep -qsa -e "$P" /proc/[0-9]*/cmdline /proc/[0-9]*/environ && found="$found process"
echo "found:$found"`

func newCanary(t *testing.T) (canary, pattern string) {
	b := make([]byte, 8)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return "wovyrcanary" + h, "wovyrcanar[y]" + h
}

func TestNoCrossTenantCarryOver(t *testing.T) {
	for _, tb := range tenantBackends() {
		t.Run(tb.name, func(t *testing.T) {
			factory := tb.factory(t)
			canary, pattern := newCanary(t)
			p, _ := newPool(t, Config{Key: Key{Backend: tb.name, Template: "default"}, Factory: factory,
				MaxLive: 1, Autoscale: autoscale.Config{Min: 1, Max: 1}})
			ctx := context.Background()
			if err := p.Reconcile(ctx, sec(0)); err != nil {
				t.Fatal(err)
			}

			la, err := p.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { la.Release() }) // idempotent; frees A's sandbox if the test fails
			if !la.Warm() {
				t.Fatal("tenant A did not get the warm sandbox")
			}
			used := la.st.sb
			a := command("tenant-a", []string{"PATH=/usr/bin:/bin", "SECRET=" + canary}, "/bin/sh", "-c", plantScript)
			if res, err := la.Run(ctx, a); err != nil || res.ExitCode != 0 || string(res.Stdout) != "planted\n" {
				t.Fatalf("tenant A: %v %+v stderr %q", err, res, resStderr(res))
			}
			if err := la.Release(); err != nil {
				t.Fatal(err)
			}
			if err := p.Reconcile(ctx, sec(1)); err != nil {
				t.Fatal(err)
			}

			lb, err := p.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lb.Release() })
			if !lb.Warm() {
				t.Fatal("tenant B did not get a warm sandbox")
			}
			_, resets := used.(sandbox.Resetter)
			if same := lb.st.sb == used; same != resets {
				t.Fatalf("B got A's used sandbox: %v; the sandbox is a Resetter: %v", same, resets)
			}
			b := command("tenant-b", []string{"PATH=/usr/bin:/bin"}, "/bin/sh", "-c", scanScript, "scan", pattern)
			res, err := lb.Run(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			want := "found:" + tb.found + "\n"
			if string(res.Stdout) != want {
				t.Fatalf("tenant B's scan: got %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
			}
			if err := lb.Release(); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if r := hostResidue(canary); (len(r) != 0) != tb.residue {
				t.Fatalf("after Close the canary is on the host at %v; want residue: %v", r, tb.residue)
			}
		})
	}
}

func command(tenant string, env []string, argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{
		Tenant:   tenant,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv, Env: env},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}
}

func resStderr(r *sandbox.Result) string {
	if r == nil {
		return ""
	}
	return string(r.Stderr)
}

// hostResidue lists where canary survives on the host: processes (argv or
// environ) and files in test and native workspaces.
func hostResidue(canary string) []string {
	var found []string
	c := []byte(canary)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f)); err == nil && bytes.Contains(b, c) {
				found = append(found, "pid "+e.Name())
			}
		}
	}
	for _, glob := range []string{"/tmp/wovyr-pooltest-*", "/dev/shm/wovyr-pooltest-*", "/tmp/wovyr-native/*"} {
		dirs, _ := filepath.Glob(glob)
		for _, d := range dirs {
			filepath.WalkDir(d, func(path string, de os.DirEntry, err error) error {
				if err == nil && de.Type().IsRegular() {
					if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, c) {
						found = append(found, path)
					}
				}
				return nil
			})
		}
	}
	return found
}
