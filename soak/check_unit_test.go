package soak

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// TestCheckRecordCatchesWhatTheSoakLooksFor is the soak's positive
// control: each way an invocation could be lost, run twice or end wrong
// is reported, so a clean soak is not a check that looks at nothing.
func TestCheckRecordCatchesWhatTheSoakLooksFor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := func(states ...string) []client.Transition {
		var ts []client.Transition
		for i, s := range states {
			ts = append(ts, client.Transition{State: s, At: t0.Add(time.Duration(i) * time.Second)})
		}
		return ts
	}
	a := accepted{id: "i1", nonce: "n1", tenant: "soak0", kind: echoNative, size: 2}
	done := func(states ...string) *client.Invocation {
		return &client.Invocation{ID: "i1", State: states[len(states)-1], Transitions: tr(states...),
			Result: &sandbox.Result{ID: "i1", Stdout: []byte("n1\n\x00\x00"), Backend: "native"}}
	}
	lost := &client.Invocation{ID: "i1", State: client.StateLost, Transitions: tr("queued", "running", "lost"),
		Result: &sandbox.Result{ID: "i1", Class: sandbox.Lost, Error: "daemon-restart", ExitCode: -1}}
	if why := checkRecord(a, done("queued", "running", "done"), 1); why != "" {
		t.Fatalf("a clean run: %s", why)
	}
	if why := checkRecord(a, lost, 1); why != "" {
		t.Fatalf("a lost run: %s", why)
	}
	other := done("queued", "running", "done")
	other.Result.ID = "i2"
	wrongOut := done("queued", "running", "done")
	wrongOut.Result.Stdout = []byte("n2\n\x00\x00")
	badLost := *lost
	badLost.Result = &sandbox.Result{Class: sandbox.Lost, Error: "who knows"}
	cases := map[string]struct {
		rec    *client.Invocation
		ledger int
		want   string
	}{
		"missing":                     {nil, 0, "no record"},
		"not terminal":                {&client.Invocation{State: client.StateRunning, Transitions: tr("queued", "running")}, 1, "state running without a terminal result"},
		"started again after lost":    {done("queued", "running", "lost", "running", "done"), 1, "transitions queued>running>lost>running>done"},
		"two terminal states":         {done("queued", "running", "done", "done"), 1, "transitions queued>running>done>done"},
		"ran twice (ledger)":          {done("queued", "running", "done"), 2, "nonce written 2 times (started true)"},
		"lost, then re-run":           {lost, 2, "nonce written 2 times (started true)"},
		"ran without a start":         {done("queued", "done"), 1, "nonce written 1 times (started false)"},
		"done but never ran":          {done("queued", "running", "done"), 0, "ran, but its nonce is in the ledger 0 times"},
		"another invocation's result": {other, 1, "result of i2 in the record of i1"},
		"another run's output":        {wrongOut, 1, `exit 0, stdout "n2\n\x00\x00" (want "n1\n\x00\x00")`},
		"lost without its reason":     {&badLost, 0, `lost with class "lost" error "who knows"`},
	}
	for name, c := range cases {
		if got := checkRecord(a, c.rec, c.ledger); got != c.want {
			t.Errorf("%s: got %q, want %q", name, got, c.want)
		}
	}
	hog := accepted{id: "i1", nonce: "n1", kind: oomNative}
	over := done("queued", "running", "done")
	over.Result.Class, over.Result.Error, over.Result.Usage.PeakMemory = sandbox.Timeout, "wall-clock limit 20s reached", hogLimit+1
	if got, want := checkRecord(hog, over, 1), `class "timeout" (want "oom"): wall-clock limit 20s reached`; got != want {
		t.Errorf("a hog past its memory limit: got %q, want %q", got, want)
	}
	over.Result.Usage.PeakMemory = hogLimit
	if got := checkRecord(hog, over, 1); got != "" {
		t.Errorf("a hog that thrashed within its limit: %q", got)
	}
	if got := ledgerCounts([]byte("a\nb\na\n")); got["a"] != 2 || got["b"] != 1 || len(got) != 2 {
		t.Errorf("ledgerCounts: %v", got)
	}
}

// TestFairnessCountsOnlyBackloggedStarts: starts count while every tenant
// waits, and Jain's index is taken over start/weight.
func TestFairnessCountsOnlyBackloggedStarts(t *testing.T) {
	tenants := []tenantSpec{{name: "a", weight: 1}, {name: "b", weight: 2}}
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rec := func(tenant string, queued, started int) *client.Invocation {
		return &client.Invocation{Tenant: tenant, Transitions: []client.Transition{{State: "queued", At: at(queued)}, {State: "running", At: at(started)}}}
	}
	recs := []*client.Invocation{
		rec("b", 0, 1),   // only b waits: not counted
		rec("a", 2, 5),   // counted: b waits too (2..8)
		rec("a", 2, 10),  // not counted: by 10 b waits for nothing
		rec("b", 2, 8),   // counted: a waits (2..10)
		rec("b", 3, 4),   // counted
		rec("b", 20, 21), // a no longer waits: not counted
	}
	starts, jain := fairness(recs, tenants)
	if starts["a"] != 1 || starts["b"] != 2 || math.Abs(jain-1) > 1e-9 {
		t.Fatalf("starts %v jain %v, want a=1 b=2 and 1", starts, jain)
	}
	recs = append(recs, rec("a", 2, 6), rec("a", 2, 7))
	starts, jain = fairness(recs, tenants)
	// a=3/1, b=2/2: (3+1)^2 / (2*(9+1)) = 0.8
	if starts["a"] != 3 || math.Abs(jain-0.8) > 1e-9 || !strings.Contains(countsLine(starts, tenants), "a(w1)=3 b(w2)=2") {
		t.Fatalf("starts %v jain %v", starts, jain)
	}
}
