package sched

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

var t0 = time.Unix(1_000_000, 0)

func cpu(m int64) resource.Vector { return resource.Vector{CPUMillis: m} }

func mustNew(t *testing.T, cfg Config, tenants ...any) *Scheduler {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(tenants); i += 2 {
		if err := s.AddTenant(tenants[i].(string), tenants[i+1].(TenantConfig)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func mustSubmit(t *testing.T, s *Scheduler, id, tenant string, d resource.Vector) {
	t.Helper()
	if err := s.Submit(Task{ID: id, Tenant: tenant, Demand: d}, t0); err != nil {
		t.Fatal(err)
	}
}

// dump is the scheduler's whole state, for "changed nothing" checks.
func dump(s *Scheduler) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+v free=%v queued=%d tasks=%d T=%d n=%d w=%d res=[", s.Snapshot(), s.Free(), s.queued, s.tasks.n, s.pool.t, s.pool.n, s.pool.wsum)
	for _, t := range s.reservations {
		b.WriteString(t.name + " ")
	}
	b.WriteString("] queues:")
	for _, t := range s.order {
		fmt.Fprintf(&b, " %s[", t.name)
		for e := t.head; e != nil; e = e.next {
			fmt.Fprintf(&b, "%s/%d ", e.task.ID, e.skips)
		}
		b.WriteString("]")
	}
	return b.String()
}

// TestBadInputChangesNothing: every invalid call returns the documented
// sentinel, matches sandbox.BadInput, and leaves the state exactly as it was.
func TestBadInputChangesNothing(t *testing.T) {
	s := mustNew(t, Config{Capacity: resource.Vector{CPUMillis: 4000, MemoryBytes: 1 << 30}, ReserveAfter: 1},
		"a", TenantConfig{Weight: 2, MaxRunning: 1}, "b", TenantConfig{Weight: 1})
	mustSubmit(t, s, "a1", "a", cpu(1000))
	mustSubmit(t, s, "a2", "a", cpu(1000))
	mustSubmit(t, s, "b1", "b", cpu(500))
	if _, ok := s.Next(s.Free(), t0); !ok {
		t.Fatal("nothing started")
	}
	before := dump(s)
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown tenant", func() error { return s.Submit(Task{ID: "x", Tenant: "zz", Demand: cpu(1)}, t0) }, ErrUnknownTenant},
		{"negative cpu", func() error { return s.Submit(Task{ID: "x", Tenant: "a", Demand: cpu(-1)}, t0) }, ErrBadTask},
		{"negative gpu", func() error {
			return s.Submit(Task{ID: "x", Tenant: "a", Demand: resource.Vector{GPU: -1}}, t0)
		}, ErrBadTask},
		{"bigger than capacity", func() error { return s.Submit(Task{ID: "x", Tenant: "a", Demand: cpu(4001)}, t0) }, ErrTooLarge},
		{"gpu absent", func() error {
			return s.Submit(Task{ID: "x", Tenant: "a", Demand: resource.Vector{GPU: 1}}, t0)
		}, ErrTooLarge},
		{"empty id", func() error { return s.Submit(Task{Tenant: "a"}, t0) }, ErrBadTask},
		{"long id", func() error { return s.Submit(Task{ID: strings.Repeat("x", MaxTaskID+1), Tenant: "a"}, t0) }, ErrBadTask},
		{"duplicate queued id", func() error { return s.Submit(Task{ID: "a2", Tenant: "b"}, t0) }, ErrDuplicateTask},
		{"duplicate running id", func() error { return s.Submit(Task{ID: "a1", Tenant: "a"}, t0) }, ErrDuplicateTask},
		{"zero weight", func() error { return s.AddTenant("c", TenantConfig{}) }, ErrBadConfig},
		{"negative weight", func() error { return s.AddTenant("c", TenantConfig{Weight: -1}) }, ErrBadConfig},
		{"huge weight", func() error { return s.AddTenant("c", TenantConfig{Weight: MaxWeight + 1}) }, ErrBadConfig},
		{"negative queue", func() error { return s.AddTenant("c", TenantConfig{Weight: 1, MaxQueued: -1}) }, ErrBadConfig},
		{"negative quota", func() error { return s.AddTenant("c", TenantConfig{Weight: 1, MaxRunning: -1}) }, ErrBadConfig},
		{"bad name", func() error { return s.AddTenant("../etc", TenantConfig{Weight: 1}) }, ErrBadConfig},
		{"duplicate tenant", func() error { return s.AddTenant("a", TenantConfig{Weight: 1}) }, ErrTenantExists},
		{"update zero weight", func() error { return s.UpdateTenant("a", TenantConfig{}) }, ErrBadConfig},
		{"update unknown", func() error { return s.UpdateTenant("zz", TenantConfig{Weight: 1}) }, ErrUnknownTenant},
		{"remove busy", func() error { return s.RemoveTenant("a") }, ErrTenantBusy},
		{"remove unknown", func() error { return s.RemoveTenant("zz") }, ErrUnknownTenant},
		{"done queued", func() error { return s.Done("a2") }, ErrUnknownTask},
		{"done unknown", func() error { return s.Done("nope") }, ErrUnknownTask},
		{"cancel running", func() error { return s.Cancel("a1") }, ErrUnknownTask},
		{"cancel unknown", func() error { return s.Cancel("nope") }, ErrUnknownTask},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, c.want) || !errors.Is(err, sandbox.BadInput) || errors.Is(err, ErrQueueFull) {
			t.Errorf("%s: got %v, want %v and bad-input", c.name, err, c.want)
		}
		if sandbox.FieldOf(err) == "" {
			t.Errorf("%s: %v names no field", c.name, err)
		}
		if after := dump(s); after != before {
			t.Fatalf("%s changed the state:\n before %s\n after  %s", c.name, before, after)
		}
	}
	if _, err := s.Stats("zz"); !errors.Is(err, ErrUnknownTenant) {
		t.Errorf("Stats of unknown tenant: %v", err)
	}
	for _, cfg := range []Config{{Capacity: cpu(-1)}, {MaxQueued: -1}, {ReserveAfter: -1}} {
		if _, err := New(cfg); !errors.Is(err, ErrBadConfig) || !errors.Is(err, sandbox.BadInput) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// TestQueueFull: the tenant bound and the global bound reject with a
// *QueueFullError (ErrQueueFull, not bad input), count the rejection, and
// queue nothing.
func TestQueueFull(t *testing.T) {
	s := mustNew(t, Config{Capacity: cpu(1000), MaxQueued: 3},
		"a", TenantConfig{Weight: 1, MaxQueued: 2}, "b", TenantConfig{Weight: 1})
	mustSubmit(t, s, "a1", "a", cpu(1))
	mustSubmit(t, s, "a2", "a", cpu(1))
	err := s.Submit(Task{ID: "a3", Tenant: "a"}, t0)
	var q *QueueFullError
	if !errors.Is(err, ErrQueueFull) || errors.Is(err, sandbox.BadInput) || !errors.As(err, &q) || q.Global || q.Limit != 2 {
		t.Fatalf("tenant bound: %v", err)
	}
	mustSubmit(t, s, "b1", "b", cpu(1))
	err = s.Submit(Task{ID: "b2", Tenant: "b"}, t0)
	if !errors.As(err, &q) || !q.Global || q.Limit != 3 || q.Tenant != "b" {
		t.Fatalf("global bound: %v", err)
	}
	a, _ := s.Stats("a")
	b, _ := s.Stats("b")
	if a.Admitted != 2 || a.Rejected != 1 || a.Queued != 2 || b.Admitted != 1 || b.Rejected != 1 || b.Queued != 1 || s.Queued() != 3 {
		t.Fatalf("counters: a=%+v b=%+v", a, b)
	}
	// Rejected ids stay free: after a start there is room again.
	if _, ok := s.Next(s.Free(), t0); !ok {
		t.Fatal("nothing started")
	}
	mustSubmit(t, s, "b2", "b", cpu(1))
}

// TestQuota: a tenant at MaxRunning is not eligible, earns nothing while it
// waits, and becomes eligible on Done.
func TestQuota(t *testing.T) {
	s := mustNew(t, Config{Capacity: cpu(100000)},
		"a", TenantConfig{Weight: 10, MaxRunning: 2}, "b", TenantConfig{Weight: 1})
	for i := range 5 {
		mustSubmit(t, s, fmt.Sprint("a", i), "a", cpu(1))
		mustSubmit(t, s, fmt.Sprint("b", i), "b", cpu(1))
	}
	got := startAll(s)
	if want := "a0 a1 b0 b1 b2 b3 b4"; strings.Join(got, " ") != want {
		t.Fatalf("starts %v, want %s", got, want)
	}
	a, _ := s.Stats("a")
	if a.Running != 2 || a.Queued != 3 || a.InUse != cpu(2) {
		t.Fatalf("a: %+v", a)
	}
	if err := s.Done("a0"); err != nil {
		t.Fatal(err)
	}
	if st, ok := s.Next(s.Free(), t0); !ok || st.Task.ID != "a2" {
		t.Fatalf("after Done: %+v %v", st, ok)
	}
}

// TestFrozenCredit: a tenant with nothing queued neither earns nor pays.
func TestFrozenCredit(t *testing.T) {
	s := mustNew(t, Config{Capacity: cpu(1000)}, "a", TenantConfig{Weight: 1}, "b", TenantConfig{Weight: 3})
	mustSubmit(t, s, "a1", "a", cpu(1))
	mustSubmit(t, s, "b1", "b", cpu(1))
	st, _ := s.Next(s.Free(), t0) // a:+1, b:+3-4 → b picked
	if st.Task.ID != "b1" {
		t.Fatalf("first pick %s", st.Task.ID)
	}
	for i := range 10 { // only a is queued: it earns 1 and pays 1 each pick
		mustSubmit(t, s, fmt.Sprint("x", i), "a", cpu(1))
		s.Next(s.Free(), t0)
	}
	b, _ := s.Stats("b")
	a, _ := s.Stats("a")
	if b.Credit != -1 || a.Credit != 1 {
		t.Fatalf("credits a=%d b=%d, want 1 and -1 (b frozen while empty)", a.Credit, b.Credit)
	}
}

// TestFreeCapsAndClips: Next hands out no more than both the caller's free
// vector and the scheduler's own capacity accounting allow.
func TestFreeCapsAndClips(t *testing.T) {
	s := mustNew(t, Config{Capacity: cpu(1000)}, "a", TenantConfig{Weight: 1})
	mustSubmit(t, s, "a1", "a", cpu(600))
	mustSubmit(t, s, "a2", "a", cpu(600))
	if _, ok := s.Next(cpu(500), t0); ok {
		t.Fatal("started 600m with 500m free")
	}
	if _, ok := s.Next(cpu(-5), t0); ok {
		t.Fatal("started with negative free")
	}
	if st, ok := s.Next(cpu(1<<40), t0); !ok || st.Task.ID != "a1" {
		t.Fatal("a1 did not start")
	}
	if _, ok := s.Next(cpu(1<<40), t0); ok {
		t.Fatal("started beyond capacity: the caller's free vector is capped by in-use accounting")
	}
	if s.InUse() != cpu(600) || s.Free() != cpu(400) || s.Capacity() != cpu(1000) {
		t.Fatalf("in use %v free %v", s.InUse(), s.Free())
	}
}

// TestWaitAccounting: wait time comes only from the times the caller passes.
func TestWaitAccounting(t *testing.T) {
	s := mustNew(t, Config{Capacity: cpu(1000)}, "a", TenantConfig{Weight: 1})
	for i, at := range []time.Duration{0, time.Second, 5 * time.Second} {
		if err := s.Submit(Task{ID: fmt.Sprint(i), Tenant: "a"}, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	var waits []time.Duration
	for _, at := range []time.Duration{3 * time.Second, 4 * time.Second, 2 * time.Second} {
		st, ok := s.Next(s.Free(), t0.Add(at))
		if !ok {
			t.Fatal("nothing started")
		}
		waits = append(waits, st.Wait)
	}
	if fmt.Sprint(waits) != "[3s 3s 0s]" {
		t.Fatalf("waits %v (a clock going backwards counts as zero)", waits)
	}
	a, _ := s.Stats("a")
	if a.WaitTotal != 6*time.Second || a.WaitMax != 3*time.Second || a.Started != 3 {
		t.Fatalf("stats %+v", a)
	}
}

// TestUpdateTenant: a weight change takes effect at once, the credit is kept,
// and removing an idle tenant forgets it.
func TestUpdateTenant(t *testing.T) {
	s := mustNew(t, roomy, "a", TenantConfig{Weight: 1}, "b", TenantConfig{Weight: 1})
	for i := range 8 {
		mustSubmit(t, s, fmt.Sprint("a", i), "a", cpu(1))
		mustSubmit(t, s, fmt.Sprint("b", i), "b", cpu(1))
	}
	if err := s.UpdateTenant("a", TenantConfig{Weight: 3}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 8 {
		st, _ := s.Next(s.Free(), t0)
		got = append(got, st.Task.Tenant)
		if err := s.Done(st.Task.ID); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, "") != "aabaaaba" {
		t.Fatalf("after weight 3:1: %v", got)
	}
	if err := s.RemoveTenant("b"); !errors.Is(err, ErrTenantBusy) {
		t.Fatalf("remove with queued tasks: %v", err)
	}
	for i := 2; i < 8; i++ {
		if err := s.Cancel(fmt.Sprint("b", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RemoveTenant("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stats("b"); !errors.Is(err, ErrUnknownTenant) {
		t.Fatal("removed tenant still known")
	}
	if err := s.AddTenant("b", TenantConfig{Weight: 1}); err != nil {
		t.Fatal(err)
	}
}
