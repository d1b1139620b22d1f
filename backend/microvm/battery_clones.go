package microvm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// Weaknesses of clones, for the snapshot rows' positive controls.
const (
	// WeakTenantGolden captures the golden after a tenant's job ran in it:
	// what the pool must never do (row 85 must flag it).
	WeakTenantGolden battery.Weakness = "golden-from-tenant-vm"
	// WeakNoThaw hands out clones without the thaw: the golden's RNG
	// state, clock and identity (rows 87 and 88 must flag it).
	WeakNoThaw battery.Weakness = "clone-not-thawed"
)

// cloneSettle is how long after its golden's capture the battery restores
// its clones: an unthawed clone's clock then lags by at least this much,
// which a job's one-second clock must see.
const cloneSettle = 3 * time.Second

// cloneScript prints what rows 87 and 88 read, one fact per line:
// boot_id, machine-id, a kernel UUID, 16 urandom bytes, the wall clock in
// seconds, then battery.ProcNames.
const cloneScript = `for f in /proc/sys/kernel/random/boot_id /etc/machine-id /proc/sys/kernel/random/uuid; do cat $f 2>/dev/null || echo "no $f"; done
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo
date +%s
` + battery.ProcNames

// cloneRun is what the snapshot rows read from one golden of a backend:
// tenant A on one clone, then two more clones scanned and compared.
type cloneRun struct {
	canary  string
	scans   [][]string // per later clone: cloneScript's lines
	residue []string   // what a later clone found of A
	window  [][2]time.Time
	err     error
}

// clones runs (once per backend) what rows 85, 87 and 88 judge.
func (b *Backend) clones(ctx context.Context) *cloneRun {
	b.bat.mu.Lock()
	defer b.bat.mu.Unlock()
	if b.bat.clones != nil {
		return b.bat.clones
	}
	r := &cloneRun{canary: "WOVYR-CANARY-" + randomID()}
	b.bat.clones = r
	r.err = b.runClones(ctx, r)
	return r
}

func (b *Backend) runClones(ctx context.Context, r *cloneRun) error {
	pooled := &Backend{cfg: b.cfg, probe: b.probe}
	pooled.cfg.Warm = true // clones that run their warm-up, as a pool's do
	defer pooled.dropGoldens()
	g, err := pooled.Golden(ctx, probeTemplate())
	if err != nil {
		return err
	}
	captured := time.Now() // the capture ends Golden (or happened earlier, on disk)
	a, err := pooled.Restore(ctx, g)
	if err != nil {
		return err
	}
	defer a.Destroy(context.WithoutCancel(ctx))
	if _, err := a.Run(ctx, canaryInvocation(r.canary)); err != nil {
		return err
	}
	time.Sleep(time.Until(captured.Add(cloneSettle)))
	for i := range 2 {
		c, err := pooled.Restore(ctx, g)
		if err != nil {
			return err
		}
		res, err := c.Run(ctx, probeInvocation("scan-"+strconv.Itoa(i), battery.ResidueScan+"\n"+cloneScript))
		c.Destroy(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if res.Class != sandbox.OK {
			return fmt.Errorf("clone scan ended %s: %s", res.Class, res.Error)
		}
		out := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(out) < 7 {
			return fmt.Errorf("clone scan printed %q", res.Stdout)
		}
		if found := out[0]; found != "residue:" {
			r.residue = append(r.residue, fmt.Sprintf("clone %d: %s", i, found))
		}
		r.scans = append(r.scans, out[1:])
		r.window = append(r.window, [2]time.Time{res.Timings.Started, res.Timings.Finished})
	}
	return nil
}

// dropGoldens forgets this backend's goldens (the battery's own are
// removed with the store at invalidation; a weakened one must never serve).
func (b *Backend) dropGoldens() {
	b.goldMu.Lock()
	defer b.goldMu.Unlock()
	store, err := b.snapshots()
	for id, g := range b.goldens {
		g.invalid.Store(true)
		g.ram.Close()
		if err == nil {
			store.Remove(g.key)
		}
		delete(b.goldens, id)
	}
}

// canaryInvocation is tenant A: the canary in a file in each writable
// place, in its env, and in the environment of a daemon in a session of its
// own, which outlives the job in its VM.
func canaryInvocation(canary string) *sandbox.Invocation {
	return &sandbox.Invocation{ID: "tenant-a", Tenant: "probe-a", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Env: []string{"C=" + canary},
			Argv: []string{"/bin/sh", "-c", `for d in /workspace /tmp /dev/shm /etc; do echo "$C" > $d/canary-a; done; setsid sleep 7777 </dev/null >/dev/null 2>&1 & sync; true`}},
		Limits: sandbox.Limits{Wall: time.Minute, Disk: probeTemplate().Limits.Disk}}
}

func probeInvocation(id, script string) *sandbox.Invocation {
	return &sandbox.Invocation{ID: id, Tenant: "probe-b", Policy: sandbox.Policy{Trust: sandbox.Hostile},
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", script}},
		Limits:   sandbox.Limits{Wall: time.Minute, Disk: probeTemplate().Limits.Disk}}
}

// cloneChecks are the snapshot rows.
func cloneChecks() []struct {
	id   int
	weak battery.Weakness
	run  func(context.Context, *Backend) battery.Observation
} {
	type check = struct {
		id   int
		weak battery.Weakness
		run  func(context.Context, *Backend) battery.Observation
	}
	judge := func(tried string, pick func(*cloneRun) []string, secure string) func(context.Context, *Backend) battery.Observation {
		return func(ctx context.Context, b *Backend) battery.Observation {
			r := b.clones(ctx)
			if r.err != nil {
				return battery.Observation{Tried: tried, Observed: r.err.Error()}
			}
			return obs(tried, pick(r), secure)
		}
	}
	return []check{
		{85, WeakTenantGolden, judge("tenant A seeds a canary in files, env and a daemon on one clone; two later clones of the same golden scan files, /proc/*/cmdline and environ",
			func(r *cloneRun) []string { return r.residue }, "no canary in either clone")},
		{87, WeakNoThaw, judge("two clones of one golden read boot_id, machine-id, a kernel UUID and 16 urandom bytes",
			func(r *cloneRun) []string {
				var bad []string
				for i, name := range []string{"boot_id", "machine-id", "uuid", "urandom"} {
					if r.scans[0][i] == r.scans[1][i] {
						bad = append(bad, "clones share their "+name+" "+r.scans[0][i])
					}
				}
				return bad
			}, "all differ")},
		{88, WeakNoThaw, judge(fmt.Sprintf("clones restored %s after their golden's capture read the wall clock", cloneSettle),
			func(r *cloneRun) []string {
				var bad []string
				for i, s := range r.scans {
					sec, err := strconv.ParseInt(s[4], 10, 64)
					if err != nil || !withinASecond(sec, r.window[i][0], r.window[i][1]) {
						bad = append(bad, fmt.Sprintf("clone %d clock %q outside its run %s–%s", i, s[4], r.window[i][0].Format(time.TimeOnly), r.window[i][1].Format(time.TimeOnly)))
					}
				}
				return bad
			}, "each clone's clock within its run (and within 50 ms at thaw, or the clone is refused)")},
	}
}

// withinASecond reports whether sec, a clock read to the second inside a
// job, lies in [from, to] give or take a second: a clock the thaw set is
// within 50 ms (checked at thaw), so only the truncation to seconds needs
// the slack; an unthawed clone lags by cloneSettle, well beyond it.
func withinASecond(sec int64, from, to time.Time) bool {
	return sec >= from.Unix()-1 && sec <= to.Unix()+1
}

// weakCapture is WeakTenantGolden: a tenant's job in the VM about to be
// captured.
func (s *vmSandbox) weakCapture() error {
	if s.b.cfg.weak != WeakTenantGolden {
		return nil
	}
	var rep agent.VMReply
	return roundTrip(s.conn, time.Now().Add(time.Minute), s.b.vmJob(canaryInvocation("WOVYR-CANARY-golden"), s.limit), &rep, 1<<20)
}

// cloneWeaknesses may snapshot; no other weakened backend does.
var cloneWeaknesses = []battery.Weakness{WeakTenantGolden, WeakNoThaw}

func snapshotsAllowed(w battery.Weakness) bool { return w == "" || slices.Contains(cloneWeaknesses, w) }
