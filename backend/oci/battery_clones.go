package oci

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// The snapshot rows (BATTERY 85–91) on gVisor. gVisor snapshots are
// opt-in (ADR 0020), but the certification covers them whatever the
// configuration: the rows run on a pooled, snapshotting copy of the
// backend under certification, so a node that turns them on runs only
// what the battery saw.

// Weaknesses of gVisor clones, for the snapshot rows' positive controls.
const (
	// TenantGolden captures the golden after a tenant's job ran in it,
	// leaving a canary in its memory-backed files and a daemon: what the
	// pool must never do (rows 85, 86 and 90 must flag it).
	TenantGolden battery.Weakness = "golden-from-tenant-sandbox"
	// NoReexec hands out clones whose agent did not re-execute itself:
	// the golden's Go runtime, PRNG state and all (row 87 must flag it).
	NoReexec battery.Weakness = "clone-not-reexecuted"
)

// cloneWeaknesses may snapshot; no other weakened copy does.
var cloneWeaknesses = []battery.Weakness{TenantGolden, NoReexec}

// cloneScan prints, one per line: battery.ResidueScan's line, boot_id,
// machine-id, 16 urandom bytes, the sorted names of the sandbox's processes
// but its own shell, and the number of the agent's (pid 1's) descriptors.
// Unlike battery.ProcNames it keeps processes without a readable exe: the
// Sentry has no kernel threads to leave out, and a process restored into
// a clone may show none (a tenant's leftover in a golden did).
const cloneScan = battery.ResidueScan + `
for f in /proc/sys/kernel/random/boot_id /etc/machine-id; do cat $f 2>/dev/null || echo "no $f"; done
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo
l=; for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; read c < $p/comm && l="$l $c"; done; echo $l | tr ' ' '\n' | sort | tr '\n' ' '; echo
ls /proc/1/fd | wc -l`

// canaryScript is tenant A: the canary in a file in each writable place,
// in its env, and in a daemon in a session of its own, which outlives the
// job (the agent kills the job's process group; the sandbox's Destroy
// kills the rest).
const canaryScript = `for d in /workspace /tmp /dev/shm; do echo "$C" > $d/canary-a; done; setsid sleep 7777 </dev/null >/dev/null 2>&1 & true`

// cloneRun is what the snapshot rows read, once per backend: a cold pooled
// sandbox's baseline, the golden's files, and two clones scanned after
// tenant A ran on a third.
type cloneRun struct {
	canary    string
	baseline  []string   // a cold pooled sandbox's cloneScan lines
	scans     [][]string // per later clone: cloneScan's lines
	draws     []uint64   // per later clone: its agent's PRNG draw
	artifacts []string   // what is wrong with the golden's files
	err       error
}

// cloneState caches the run per backend (the target and each weakened
// copy have their own).
type cloneState struct {
	mu  sync.Mutex
	run *cloneRun
}

func (b *Backend) clones(ctx context.Context, img string) *cloneRun {
	b.cloneBat.mu.Lock()
	defer b.cloneBat.mu.Unlock()
	if b.cloneBat.run == nil {
		r := &cloneRun{canary: "WOVYR-CANARY-" + sandbox.NewID()[:12]}
		r.err = b.runClones(ctx, img, r)
		b.cloneBat.run = r
	}
	return b.cloneBat.run
}

// snapshotSibling is b as a pool that snapshots, with b's weakness.
func (b *Backend) snapshotSibling() *Backend {
	cfg := b.cfg
	cfg.Pooled, cfg.Snapshots = true, true
	return b.copyWith(cfg, b.weak)
}

func (b *Backend) runClones(ctx context.Context, img string, r *cloneRun) error {
	sib := b.snapshotSibling()
	defer sib.RemoveGoldens()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: img}
	scan := func(s sandbox.Sandbox, id string) ([]string, error) {
		res, err := s.Run(ctx, &sandbox.Invocation{ID: id, Tenant: "wovyr-battery-b", Policy: sandbox.Policy{Trust: sandbox.Untrusted},
			Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", cloneScan}}})
		if err != nil {
			return nil, err
		}
		out := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if res.Class != sandbox.OK || len(out) != 6 {
			return nil, fmt.Errorf("scan %s ended %s (%s): %q %q", id, res.Class, res.Error, res.Stdout, res.Stderr)
		}
		return out, nil
	}
	cold, err := sib.Prepare(ctx, tmpl)
	if err != nil {
		return err
	}
	r.baseline, err = scan(cold, "baseline")
	cold.Destroy(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	sg, err := sib.Golden(ctx, tmpl)
	if err != nil {
		return err
	}
	g := sg.(*golden)
	a, err := sib.Restore(ctx, g)
	if err != nil {
		return err
	}
	defer a.Destroy(context.WithoutCancel(ctx))
	if _, err := a.Run(ctx, canaryInvocation(r.canary)); err != nil {
		return err
	}
	for i := range 2 {
		c, err := sib.Restore(ctx, g)
		if err != nil {
			return err
		}
		rep, err := c.(*Sandbox).client.Do(ctx, agent.Job{ID: "draw", Draw: true})
		if err == nil {
			var lines []string
			lines, err = scan(c, fmt.Sprintf("clone-%d", i))
			r.scans, r.draws = append(r.scans, lines), append(r.draws, rep.Draw)
		}
		c.Destroy(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
	}
	r.artifacts = snapshot.Audit(g.disk.Dir, []byte("WOVYR-CANARY-"))
	sib.RemoveGoldens()
	if _, err := os.Stat(g.disk.Dir); !os.IsNotExist(err) {
		r.artifacts = append(r.artifacts, "the golden's directory outlived its invalidation")
	}
	return nil
}

func canaryInvocation(canary string) *sandbox.Invocation {
	return &sandbox.Invocation{ID: "tenant-a", Tenant: "wovyr-battery-a", Policy: sandbox.Policy{Trust: sandbox.Untrusted},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"C=" + canary}, Argv: []string{"/bin/sh", "-c", canaryScript}},
		Limits:   sandbox.Limits{Wall: time.Minute}}
}

// RemoveGoldens forgets b's goldens and removes them from the store: the
// battery's, and `wovyr bench --clones`'s, which no pool of the node uses.
func (b *Backend) RemoveGoldens() {
	b.goldMu.Lock()
	defer b.goldMu.Unlock()
	store, err := b.snapshots()
	for id, g := range b.goldens {
		g.invalid.Store(true)
		if err == nil {
			store.Remove(g.key)
		}
		delete(b.goldens, id)
	}
}

// weakCapture is TenantGolden: a tenant's job in the sandbox about to be
// checkpointed.
func (s *Sandbox) weakCapture(ctx context.Context) error {
	if s.b.weak != TenantGolden {
		return nil
	}
	inv := canaryInvocation("WOVYR-CANARY-golden")
	_, err := s.client.Do(ctx, agent.Job{ID: "tenant-in-golden", Argv: inv.Workload.Argv, Env: append(inv.Workload.Env, guestPATH),
		Dir: workDir, Wall: time.Minute, Output: 4096})
	return err
}

// cloneProbes are rows 85, 86, 87 and 90 for gVisor.
func cloneProbes(b *Backend) []battery.Probe {
	judge := func(id int, w battery.Weakness, tried, secure string, pick func(*cloneRun) []string) battery.Probe {
		return battery.Probe{ID: id, Weakness: w, Backends: []string{b.name}, Run: func(ctx context.Context, t battery.Target) battery.Observation {
			tb, ok := t.Backend.(*Backend)
			if !ok {
				return battery.Observation{Tried: tried, Observed: fmt.Sprintf("target is %T", t.Backend)}
			}
			r := tb.clones(ctx, t.Image)
			if r.err != nil {
				return battery.Observation{Tried: tried, Observed: r.err.Error()}
			}
			if bad := pick(r); len(bad) > 0 {
				return battery.Observation{Tried: tried, Observed: strings.Join(bad, "; ")}
			}
			return battery.Observation{Tried: tried, Observed: secure, Secure: true}
		}}
	}
	return []battery.Probe{
		judge(85, TenantGolden, "tenant A seeds a canary in /workspace, /tmp, /dev/shm, its env and a setsid daemon on one clone; two later clones of the golden scan files, /proc/*/cmdline and environ",
			"no canary in either clone", func(r *cloneRun) []string {
				var bad []string
				for i, s := range r.scans {
					if s[0] != "residue:" {
						bad = append(bad, fmt.Sprintf("clone %d: %s", i, s[0]))
					}
				}
				return bad
			}),
		judge(86, TenantGolden, "modes and owner of the golden's directory and image files, a canary in them, and the directory after invalidation",
			"0700 directory, 0600 files, root's, no canary, removed at invalidation", func(r *cloneRun) []string { return r.artifacts }),
		judge(87, NoReexec, "two clones of one golden: boot_id, machine-id, 16 urandom bytes and a draw of the agent's own PRNG",
			"all differ", func(r *cloneRun) []string {
				var bad []string
				for i, name := range []string{"boot_id", "machine-id", "urandom"} {
					if r.scans[0][i+1] == r.scans[1][i+1] {
						bad = append(bad, "clones share their "+name+" "+r.scans[0][i+1])
					}
				}
				if r.draws[0] == r.draws[1] {
					bad = append(bad, fmt.Sprintf("clones' agents drew the same %d", r.draws[0]))
				}
				return bad
			}),
		judge(90, TenantGolden, "a clone's processes and the agent's descriptors against a cold pooled sandbox of the template",
			"identical", func(r *cloneRun) []string {
				var bad []string
				for i, s := range r.scans {
					if !slices.Equal(s[4:], r.baseline[4:]) {
						bad = append(bad, fmt.Sprintf("clone %d: processes %q and %s agent fds, cold %q and %s", i, s[4], s[5], r.baseline[4], r.baseline[5]))
					}
				}
				return bad
			}),
	}
}

// cloneNotApplicable are the snapshot rows that do not apply to gVisor.
var cloneNotApplicable = map[int]string{
	88: "the Sentry reads the host's clock on every call: a clone has no clock of its own to lag, and the host refuses a clone whose re-executed agent's clock is more than 50 ms off its own (checkThaw; TestGVisorCloneIsItsOwnAndCarriesNothing reads clones' clocks); no configuration builds a clone with a clock of its own, so no control can flag",
	89: "a gVisor clone runs --network=none: loopback only, no address, MAC, connection or cache of a network to carry (TestGVisorCloneEgressDenied); an allowlist's sandbox is never a clone (Template.Egress has no golden: its netstack starts in its slot at Run)",
	91: "no credential enters a gVisor sandbox: an allowlist is enforced host-side by its slot (no proxy credential or token in the sandbox), and a golden is captured before any invocation (row 85 checks that nothing of a tenant's is in it)",
}
