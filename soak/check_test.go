package soak

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// tally is what the checks count.
type tally struct {
	finished, lost, cancelled int
	byClass                   map[string]int
}

// checkRecord checks one accepted invocation's terminal record: one
// terminal state, at most one start, and the outcome its job must have
// (any job may instead be lost, and a cancelled one killed). ledger is how
// often its nonce was written by a run. It returns what is wrong, or "".
func checkRecord(a accepted, rec *client.Invocation, ledger int) string {
	if rec == nil {
		return "no record"
	}
	if !client.Terminal(rec.State) || rec.Result == nil {
		return fmt.Sprintf("state %s without a terminal result", rec.State)
	}
	var states []string
	for _, tr := range rec.Transitions {
		states = append(states, tr.State)
	}
	path := strings.Join(states, ">")
	want := []string{"queued>running>" + rec.State, "queued>" + rec.State}
	if !slices.Contains(want, path) {
		return "transitions " + path // a second start or terminal state would show here
	}
	started := strings.Contains(path, "running")
	res := rec.Result
	if res.ID != "" && res.ID != a.id {
		return fmt.Sprintf("result of %s in the record of %s", res.ID, a.id)
	}
	// The ledger line is the run's first act: a run that never started
	// wrote none, and none may be written twice.
	if ledger > 1 || (!started && ledger > 0) {
		return fmt.Sprintf("nonce written %d times (started %v)", ledger, started)
	}
	if rec.State == client.StateLost {
		if res.Class != sandbox.Lost || res.Error != "daemon-restart" {
			return fmt.Sprintf("lost with class %q error %q", res.Class, res.Error)
		}
		return ""
	}
	if a.cancelled && res.Class == sandbox.Killed {
		return ""
	}
	if rec.State != client.StateDone || !started {
		return fmt.Sprintf("%s with class %q: %s", rec.State, res.Class, res.Error)
	}
	native := a.kind != echoWasm && a.kind != echoContainer && a.kind != echoGVisor
	if native && ledger != 1 {
		return fmt.Sprintf("ran, but its nonce is in the ledger %d times", ledger)
	}
	// A hog near its memory limit can thrash (the kernel reclaims the
	// cgroup's file pages instead of killing it) until its wall limit on
	// a loaded host: acceptable while the limit itself held.
	if a.kind == oomNative && res.Class == sandbox.Timeout && res.Usage.PeakMemory > 0 && res.Usage.PeakMemory <= hogLimit {
		return ""
	}
	wantClass, wantOut := sandbox.OK, ""
	switch a.kind {
	case echoNative:
		wantOut = a.nonce + "\n" + strings.Repeat("\x00", a.size)
	case echoWasm, echoContainer, echoGVisor, abandonNative:
		wantOut = a.nonce + "\n"
	case timeoutNative:
		wantClass = sandbox.Timeout
	case oomNative:
		wantClass = sandbox.OOM
	case cancelNative:
		return fmt.Sprintf("cancelled, yet ended with class %q", res.Class)
	}
	if res.Class != wantClass {
		return fmt.Sprintf("class %q (want %q): %s", res.Class, wantClass, res.Error)
	}
	if wantClass == sandbox.OK && (res.ExitCode != 0 || string(res.Stdout) != wantOut) {
		return fmt.Sprintf("exit %d, stdout %q (want %q)", res.ExitCode, trim(res.Stdout), trim([]byte(wantOut)))
	}
	wantBackend := map[jobKind]string{echoWasm: "wasm", echoContainer: "container", echoGVisor: "gvisor"}[a.kind]
	if wantBackend == "" {
		wantBackend = "native"
	}
	if res.Backend != wantBackend {
		return fmt.Sprintf("ran on %s, want %s", res.Backend, wantBackend)
	}
	return ""
}

func trim(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// ledgerCounts counts each nonce's lines in the ledger.
func ledgerCounts(b []byte) map[string]int {
	n := map[string]int{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 {
			n[string(l)]++
		}
	}
	return n
}

// storeScan reads every record the daemon's store holds: the ids it
// accepted, whether or not the client heard back.
func storeScan(state string) (map[string]store.Invocation, error) {
	s, err := store.Open(state, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	recs := map[string]store.Invocation{}
	return recs, s.Each(func(rec store.Invocation) error {
		recs[rec.ID] = rec
		return nil
	})
}

// fairness returns the per-tenant starts made while every tenant had an
// invocation queued (so the scheduler had a choice among all of them) and
// Jain's index of start/weight over them.
func fairness(recs []*client.Invocation, tenants []tenantSpec) (starts map[string]int, jain float64) {
	type event struct {
		at     time.Time
		tenant string
		delta  int // +1 queued, -1 left the queue
		start  bool
	}
	var evs []event
	for _, rec := range recs {
		if rec == nil || len(rec.Transitions) < 2 {
			continue
		}
		q, next := rec.Transitions[0], rec.Transitions[1]
		evs = append(evs, event{q.At, rec.Tenant, 1, false}, event{next.At, rec.Tenant, -1, next.State == client.StateRunning})
	}
	// At one instant, leaving the queue comes before joining it: a start
	// counts only if the tenant was waiting before it.
	sort.SliceStable(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta < evs[j].delta
	})
	waiting := map[string]int{}
	starts = map[string]int{}
	for _, e := range evs {
		all := true
		for _, tn := range tenants {
			all = all && waiting[tn.name] > 0
		}
		if all && e.start {
			starts[e.tenant]++
		}
		waiting[e.tenant] += e.delta
	}
	var sum, sq float64
	for _, tn := range tenants {
		x := float64(starts[tn.name]) / float64(tn.weight)
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return starts, 0
	}
	return starts, sum * sum / (float64(len(tenants)) * sq)
}

// countsLine formats per-tenant counts with their weights.
func countsLine(starts map[string]int, tenants []tenantSpec) string {
	var parts []string
	for _, tn := range tenants {
		parts = append(parts, tn.name+"(w"+strconv.Itoa(tn.weight)+")="+strconv.Itoa(starts[tn.name]))
	}
	return strings.Join(parts, " ")
}
