package soak

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// plan is one soak's size.
type plan struct {
	name        string
	invocations int64 // accepted invocations to reach
	kills       int
	backends    []string
	mix         mix
	workers     int // per tenant, each with one invocation outstanding
	limit       time.Duration
}

// The short pass runs in make test; WOVYR_SOAK_FAULTS=full is make
// soak-faults. Per mille of each kind, in jobKind order.
var plans = map[string]plan{
	"short": {name: "short", invocations: 800, kills: 1, backends: []string{"native", "wasm"},
		mix: mix{700, 150, 0, 0, 40, 30, 30, 20, 30}, workers: 6, limit: 2 * time.Minute},
	"full": {name: "full", invocations: 10000, kills: 3, backends: []string{"native", "wasm", "container", "gvisor"},
		mix: mix{620, 150, 60, 20, 40, 30, 30, 20, 30}, workers: 6, limit: 9 * time.Minute},
}

// TestSoakWithFaults drives a real daemon (package doc).
func TestSoakWithFaults(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the soak needs root (CI runs as root)")
	}
	p, ok := plans[os.Getenv("WOVYR_SOAK_FAULTS")]
	if !ok {
		p = plans["short"]
	}
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("WOVYR_SOAK_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("soak %s, seed %d (WOVYR_SOAK_SEED=%d repeats it)", p.name, seed, seed)

	root, err := os.MkdirTemp("", "wovyr-soak-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o711)
	state, tmp := filepath.Join(root, "state"), filepath.Join(root, "tmp")
	os.MkdirAll(state, 0o711)
	os.MkdirAll(tmp, 0o700)
	ledger := filepath.Join(root, "ledger")
	if err := os.WriteFile(ledger, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(ledger, 0o666) // native jobs run as a sandbox uid
	t.Cleanup(func() { os.RemoveAll(root) })

	prepStart := time.Now()
	wovyr, guest := binaries(t)
	prepareState(t, wovyr, guest, state, p.backends)
	prep := time.Since(prepStart)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), p.limit)
	defer cancel()
	mod, err := wat(root)
	if err != nil {
		t.Fatal(err)
	}
	// Names unique to this run: the leak checks attribute cgroups by them,
	// and another soak may share the host.
	var tenants []tenantSpec
	for i := range 8 {
		tenants = append(tenants, tenantSpec{name: fmt.Sprintf("soak%x-%d", seed&0xffffff, i), weight: 1 + i/2, token: fmt.Sprintf("soak-token-%d-%d", seed, i)})
	}
	conf := filepath.Join(root, "serve.json")
	writeConfig(t, conf, tenants, 4)

	var names sandboxNames
	before := snapshot(root, state, tmp, tenants, &names)
	wctx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { names.watch(wctx, state); close(watched) }()

	log := &syncBuffer{}
	d, err := startDaemon(ctx, wovyr, state, conf, tmp, log)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, log)
	}
	l := &load{tenants: tenants, mix: p.mix, module: mod, ledger: ledger, marker: fmt.Sprintf("soak%x", seed&0xffffff)}
	l.cur.Store(d)

	// Kill points: seeded, one in each of kills+1 equal stretches.
	r := rand.New(rand.NewSource(seed))
	var killAt []int64
	for i := 1; i <= p.kills; i++ {
		stretch := p.invocations / int64(p.kills+1)
		killAt = append(killAt, stretch*int64(i)+r.Int63n(stretch/2)-stretch/4)
	}
	var seq atomic.Int64
	var wg sync.WaitGroup
	for i, tn := range tenants {
		for w := range p.workers {
			wr := rand.New(rand.NewSource(seed + int64(i*100+w)))
			wg.Add(1)
			go func() { defer wg.Done(); l.worker(ctx, tn, wr, p.invocations, &seq) }()
		}
	}
	kills := 0
	var crashed hostState
	var downtime time.Duration
	for _, at := range killAt {
		for l.nAccepted.Load() < at && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if ctx.Err() != nil {
			break
		}
		if kills == 0 {
			// The control below needs a sandbox caught with both its
			// mounts and its cgroup: a kill between a prepare and its
			// claim leaves mounts only. Wait (bounded) for such a moment.
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if h := snapshot(root, state, tmp, tenants, &names); len(h.mounts) > 0 && len(h.cgroups) > 0 {
					break
				}
			}
		}
		d.kill()
		kills++
		if kills == 1 {
			// The positive control of the leak checks: a killed daemon
			// leaves its sandboxes behind until the restart reconciles.
			crashed = snapshot(root, state, tmp, tenants, &names)
		}
		t0 := time.Now()
		if d, err = startDaemon(ctx, wovyr, state, conf, tmp, log); err != nil {
			cancel()
			wg.Wait()
			t.Fatalf("restart %d: %v\n%s", kills, err, tail(log.String()))
		}
		downtime += time.Since(t0)
		l.cur.Store(d)
	}
	wg.Wait()
	loadDone := time.Since(began)
	if ctx.Err() != nil {
		t.Errorf("the soak ran past its %s bound at %d accepted", p.limit, l.nAccepted.Load())
	}

	// Every accepted id, from the API: exactly one terminal record.
	fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
	defer fcancel()
	lines, _ := os.ReadFile(ledger)
	ran := ledgerCounts(lines)
	byTenant := map[string]tenantSpec{}
	for _, tn := range tenants {
		byTenant[tn.name] = tn
	}
	recs := make([]*client.Invocation, len(l.accepted))
	classes, backends := map[string]int{}, map[string]int{}
	lost, bad, thrashed := 0, 0, 0
	for i, a := range l.accepted {
		recs[i] = l.follow(fctx, byTenant[a.tenant], a.id)
		if why := checkRecord(a, recs[i], ran[a.nonce]); why != "" {
			if bad++; bad <= 20 {
				t.Errorf("%s %s (%s): %s", a.id, a.kind, a.nonce, why)
			}
		}
		if recs[i] != nil && recs[i].Result != nil {
			classes[recs[i].State+"/"+string(recs[i].Result.Class)]++
			if b := recs[i].Result.Backend; b != "" {
				backends[b]++
			}
			if a.kind == oomNative && recs[i].Result.Class == sandbox.Timeout {
				thrashed++
			}
			if recs[i].State == client.StateLost {
				lost++
			}
		}
	}
	for _, pr := range l.problems {
		t.Errorf("API contract: %s", pr)
	}
	starts, jain := fairness(recs, tenants)
	if !d.stop(30 * time.Second) {
		t.Errorf("the daemon ignored SIGTERM:\n%s", tail(log.String()))
	}
	stopWatch()
	<-watched

	// The store holds the accepted ids and at most the in-doubt ones more;
	// a bad request recorded nothing; no nonce is in two records.
	stored, err := storeScan(state)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, a := range l.accepted {
		known[a.id] = true
		if _, ok := stored[a.id]; !ok {
			t.Errorf("accepted %s is not in the store", a.id)
		}
	}
	unheard, storedLost := 0, 0
	for id, rec := range stored {
		if rec.State == store.Lost {
			storedLost++
		}
		if !rec.State.Terminal() {
			t.Errorf("stored %s is %s after shutdown", id, rec.State)
		}
		if !known[id] {
			unheard++
		}
	}
	if unheard > int(l.nInDoubt.Load()) {
		t.Errorf("the store holds %d records no client heard of, more than the %d submissions cut off by a kill (a bad request was recorded?)", unheard, l.nInDoubt.Load())
	}
	for n, c := range ran {
		if c > 1 {
			t.Errorf("nonce %s ran %d times", n, c)
		}
	}

	// The host holds nothing of the soak's.
	after := snapshot(root, state, tmp, tenants, &names)
	leaks := map[string][]string{
		"processes": after.procs, "mounts": after.mounts, "cgroups": after.cgroups, "files": after.files,
		"netns": newSince(before.netns, after.netns), "nft tables": newSince(before.nft, after.nft),
	}
	var leakNames []string
	for k := range leaks {
		leakNames = append(leakNames, k)
	}
	sort.Strings(leakNames)
	leakReport := ""
	for _, k := range leakNames {
		leakReport += fmt.Sprintf(" %s=%d", k, len(leaks[k]))
		if len(leaks[k]) > 0 {
			t.Errorf("leaked %s: %q", k, leaks[k])
		}
	}
	if kills > 0 && (len(crashed.mounts) == 0 || len(crashed.cgroups) == 0) {
		t.Errorf("right after the first kill the leak checks saw %d mounts and %d cgroups of the soak's: they would miss a leak", len(crashed.mounts), len(crashed.cgroups))
	}
	newTmp := newSince(before.tmp, after.tmp)
	newTmp = slices.DeleteFunc(newTmp, func(p string) bool { return p == root })

	total := time.Since(began)
	t.Logf("soak %s seed %d: accepted %d (answered with an id), finished %d, lost %d; in the store %d records, %d lost; refused %d (429/503), unreachable %d (restarting), in doubt %d (cut off by a kill; %d of them stored), bad requests %d (400, none stored)",
		p.name, seed, len(l.accepted), len(l.accepted)-lost, lost, len(stored), storedLost, l.nRefused.Load(), l.nDown.Load(), l.nInDoubt.Load(), unheard, l.nBad.Load())
	t.Logf("kills %d (restart downtime %s), load %s, checks %s (build and certification before: %s); outcomes %v",
		kills, downtime.Round(time.Millisecond), loadDone.Round(time.Second), (total - loadDone).Round(time.Second), prep.Round(time.Second), classes)
	t.Logf("ran on: %v; memory hogs that hit their wall limit instead, within the memory limit: %d", backends, thrashed)
	t.Logf("starts while all backlogged: %s; Jain %.4f", countsLine(starts, tenants), jain)
	t.Logf("left by the first kill until the restart: processes=%d mounts=%d cgroups=%d files=%d", len(crashed.procs), len(crashed.mounts), len(crashed.cgroups), len(crashed.files))
	t.Logf("leaks:%s; host-wide new /tmp/wovyr-* (other runs share the host): %d", leakReport, len(newTmp))
	if kills < p.kills {
		t.Errorf("only %d of %d kills happened", kills, p.kills)
	}
	if int64(len(l.accepted)) < p.invocations {
		t.Errorf("accepted %d of %d invocations", len(l.accepted), p.invocations)
	}
	win := 0
	for _, n := range starts {
		win += n
	}
	if win < 20*len(tenants) || jain < 0.99 {
		t.Errorf("fairness: %d starts while all tenants were backlogged, Jain %.4f (want >= %d starts, Jain >= 0.99)", win, jain, 20*len(tenants))
	}
	if t.Failed() {
		t.Logf("daemon log tail:\n%s", tail(log.String()))
	}
}

// tail is the end of a daemon log, for a failure message.
func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// wat compiles echoWat with wat2wasm (apt wabt) in dir.
func wat(dir string) ([]byte, error) {
	src, out := filepath.Join(dir, "echo.wat"), filepath.Join(dir, "echo.wasm")
	if err := os.WriteFile(src, []byte(echoWat), 0o644); err != nil {
		return nil, err
	}
	if b, err := exec.Command("wat2wasm", src, "-o", out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("wat2wasm (apt wabt): %v\n%s", err, b)
	}
	return os.ReadFile(out)
}
