package oci

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot/snapshottest"
)

// TestGVisorClonesAreUnique is BATTERY 87 at scale for gVisor clones:
// WOVYR_SOAK_CLONES clones of one golden (4 here; `make soak` runs 100)
// read boot_id, machine-id and 16 urandom bytes at 0, 10 and 100 ms after
// their restore, and report their agents' draws (the re-executed agent's
// own PRNG, and the one it made when it began serving): every reading is
// distinct but a clone's own identity, which stays put.
func TestGVisorClonesAreUnique(t *testing.T) {
	n := snapshottest.SoakClones(t, 4)
	b := snapBackend(t)
	ctx := context.Background()
	g, err := b.Golden(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	const read = `cat /proc/sys/kernel/random/boot_id /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo`
	seen := map[string]string{}
	note := func(i int, what, v string) {
		if other, dup := seen[v]; dup {
			t.Fatalf("clone %d's %s %q equals %s", i, what, v, other)
		}
		seen[v] = fmt.Sprintf("clone %d's %s", i, what)
	}
	for i := range n {
		sb, err := b.Restore(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		s := sb.(*Sandbox)
		draw, err := s.client.Do(ctx, agent.Job{ID: "draw", Draw: true})
		if err != nil {
			t.Fatal(err)
		}
		res := runScript(t, s, read+"; sleep 0.01; "+read+"; sleep 0.09; "+read)
		s.Destroy(ctx)
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 9 {
			t.Fatalf("clone %d printed %q %q", i, res.Stdout, res.Stderr)
		}
		for j, l := range lines {
			what := []string{"boot_id", "machine-id", "urandom"}[j%3]
			if what != "urandom" && j >= 3 {
				if l != lines[j%3] {
					t.Fatalf("clone %d: its %s changed during a job: %q then %q", i, what, lines[j%3], l)
				}
				continue
			}
			note(i, what, l)
		}
		note(i, "agent's PRNG draw", strconv.FormatUint(s.boot.thawed.Rand, 10))
		note(i, "agent's draw at serving", strconv.FormatUint(draw.Draw, 10))
	}
	t.Logf("%d clones, %d distinct readings", n, len(seen))
}
