package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

var traceCapacity = resource.Vector{CPUMillis: 4000, MemoryBytes: 8 << 30, GPU: 2}

// driver applies random operations to several implementations in lockstep
// and checks that they answer alike. Its choices depend only on its seed
// and on the first implementation's answers.
type driver struct {
	tb      testing.TB
	r       *rand.Rand
	now     time.Time
	nextID  int
	names   []string // every tenant name ever used, removed ones too
	ids     []string // every task id ever submitted
	running []string // ids started and not yet Done (per the first impl)
	dropped int64    // credit of removed tenants
	log     []string
	// unit, when set, is the demand of every task: a unit-demand trace.
	unit *resource.Vector
	// gpuQuota gives tenants random GPU quotas.
	gpuQuota bool
}

func newDriver(tb testing.TB, seed uint64) *driver {
	return &driver{tb: tb, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: time.Unix(1e9, 0)}
}

// errKey names the sentinel and class of err, so implementations can be
// compared without their messages.
func errKey(err error) string {
	if err == nil {
		return "ok"
	}
	var b strings.Builder
	for _, s := range []error{ErrQueueFull, ErrUnknownTenant, ErrTenantExists, ErrTenantBusy, ErrBadConfig,
		ErrBadTask, ErrTooLarge, ErrDuplicateTask, ErrUnknownTask} {
		if errors.Is(err, s) {
			b.WriteString(s.Error() + ";")
		}
	}
	if errors.Is(err, sandbox.BadInput) {
		b.WriteString("bad-input;")
	}
	var q *QueueFullError
	if errors.As(err, &q) {
		fmt.Fprintf(&b, "%+v", *q)
	}
	return b.String()
}

func (d *driver) weight() int64 {
	if d.r.IntN(3) == 0 {
		return 1 + d.r.Int64N(20)
	}
	return []int64{1, 1, 2, 3, 5, 8}[d.r.IntN(6)]
}

func (d *driver) tenantConfig() TenantConfig {
	c := TenantConfig{Weight: d.weight(), MaxQueued: d.r.IntN(7), MaxRunning: d.r.IntN(4)}
	if d.gpuQuota {
		c.MaxGPU = d.r.Int64N(3)
	}
	switch d.r.IntN(30) {
	case 0:
		c.Weight = 0
	case 1:
		c.Weight = -3
	case 2:
		c.Weight = MaxWeight + 1
	case 3:
		c.MaxQueued = -1
	case 4:
		c.MaxRunning = -1
	}
	return c
}

func (d *driver) name() string {
	if len(d.names) == 0 || d.r.IntN(25) == 0 {
		return "nobody"
	}
	return d.names[d.r.IntN(len(d.names))]
}

func (d *driver) demand() resource.Vector {
	if d.unit != nil {
		return *d.unit
	}
	switch d.r.IntN(40) {
	case 0:
		return resource.Vector{CPUMillis: -1}
	case 1:
		return traceCapacity.Add(resource.Vector{GPU: 1})
	case 2, 3, 4:
		return traceCapacity
	case 5, 6, 7, 8:
		return resource.Vector{}
	}
	v := resource.Vector{CPUMillis: 100 * (1 + d.r.Int64N(20)), MemoryBytes: (1 + d.r.Int64N(16)) << 28}
	if d.r.IntN(8) == 0 {
		v.GPU = 1 + d.r.Int64N(2)
	}
	return v
}

func (d *driver) free(im impl) resource.Vector {
	if d.r.IntN(4) != 0 {
		return im.Free()
	}
	return resource.Vector{CPUMillis: d.r.Int64N(5000) - 500, MemoryBytes: d.r.Int64N(9 << 30), GPU: d.r.Int64N(3)}
}

// step applies one random operation to every implementation.
func (d *driver) step(ims []impl) {
	d.now = d.now.Add(time.Duration(d.r.IntN(1000)) * time.Millisecond)
	var out []string
	each := func(f func(im impl) string) {
		out = out[:0]
		for _, im := range ims {
			out = append(out, f(im))
		}
	}
	switch k := d.r.IntN(100); {
	case k < 4:
		name := fmt.Sprintf("t%d", len(d.names))
		if d.r.IntN(10) == 0 {
			name = d.name()
		} else if d.r.IntN(30) == 0 {
			name = "Bad Name"
		} else {
			d.names = append(d.names, name)
		}
		c := d.tenantConfig()
		each(func(im impl) string { return "add " + name + " " + errKey(im.AddTenant(name, c)) })
	case k < 6:
		name, c := d.name(), d.tenantConfig()
		each(func(im impl) string { return "update " + name + " " + errKey(im.UpdateTenant(name, c)) })
	case k < 7:
		name := d.name()
		var credit int64
		for _, st := range ims[0].Snapshot() {
			if st.Tenant == name {
				credit = st.Credit
			}
		}
		each(func(im impl) string { return "remove " + name + " " + errKey(im.RemoveTenant(name)) })
		if out[0] == "remove "+name+" ok" {
			d.dropped += credit
		}
	case k < 45:
		task := Task{ID: fmt.Sprintf("k%d", d.nextID), Tenant: d.name(), Demand: d.demand()}
		d.nextID++
		if d.r.IntN(20) == 0 && len(d.ids) > 0 {
			task.ID = d.ids[d.r.IntN(len(d.ids))]
		} else if d.r.IntN(100) == 0 {
			task.ID = ""
		}
		d.ids = append(d.ids, task.ID)
		each(func(im impl) string { return fmt.Sprintf("submit %+v %s", task, errKey(im.Submit(task, d.now))) })
	case k < 75:
		free := d.free(ims[0])
		each(func(im impl) string {
			st, ok := im.Next(free, d.now)
			return fmt.Sprintf("next %v → %v %+v", free, ok, st)
		})
		if strings.Contains(out[0], "→ true") {
			id := out[0][strings.Index(out[0], "ID:")+3:]
			d.running = append(d.running, id[:strings.IndexByte(id, ' ')])
		}
	case k < 93:
		id := "k-none"
		i := -1
		if len(d.running) > 0 && d.r.IntN(20) != 0 {
			i = d.r.IntN(len(d.running))
			id = d.running[i]
		}
		each(func(im impl) string { return "done " + id + " " + errKey(im.Done(id)) })
		if i >= 0 && out[0] == "done "+id+" ok" {
			d.running[i] = d.running[len(d.running)-1]
			d.running = d.running[:len(d.running)-1]
		}
	default:
		id := "k-none"
		if len(d.ids) > 0 {
			id = d.ids[d.r.IntN(len(d.ids))]
		}
		each(func(im impl) string { return "cancel " + id + " " + errKey(im.Cancel(id)) })
	}
	for i := 1; i < len(out); i++ {
		if out[i] != out[0] {
			d.tb.Fatalf("step %d: implementations disagree:\n fast:   %s\n oracle: %s", len(d.log), out[0], out[i])
		}
	}
	d.log = append(d.log, out[0])
	snap0, free0 := ims[0].Snapshot(), ims[0].Free()
	sum := d.dropped
	for _, st := range snap0 {
		sum += st.Credit
	}
	if sum != 0 {
		d.tb.Fatalf("step %d (%s): credits sum to %d, want 0", len(d.log), out[0], sum)
	}
	for _, im := range ims[1:] {
		snap, free := im.Snapshot(), im.Free()
		if free != free0 || len(snap) != len(snap0) {
			d.tb.Fatalf("step %d (%s): free %v vs %v, %d vs %d tenants", len(d.log), out[0], free0, free, len(snap0), len(snap))
		}
		for i := range snap {
			if snap[i] != snap0[i] {
				d.tb.Fatalf("step %d (%s): state differs:\n fast:   %+v\n oracle: %+v", len(d.log), out[0], snap0[i], snap[i])
			}
		}
	}
}

func newPair(tb testing.TB, cfg Config) (*Scheduler, *oracle) {
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	o, err := newOracle(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s, o
}

// TestFastMatchesOracle replays random traces on the fast scheduler and the
// O(n) oracle in lockstep: every answer and the full state after every
// operation must be identical. Variants force frequent rebasing of the
// virtual counter and start with many tenants of few weights.
func TestFastMatchesOracle(t *testing.T) {
	seen := map[string]int{}
	for _, v := range []struct {
		name     string
		seeds    int
		rebaseAt int64
		tenants  int
		queued   int
	}{{"plain", 50, rebaseAt, 0, 40}, {"rebase", 30, 3, 0, 40}, {"many", 8, rebaseAt, 300, 1500}} {
		t.Run(v.name, func(t *testing.T) {
			for seed := range uint64(scale(v.seeds)) {
				s, o := newPair(t, Config{Capacity: traceCapacity, MaxQueued: v.queued, ReserveAfter: 2})
				s.pool.rebaseAt = v.rebaseAt
				d := newDriver(t, seed)
				for i := range v.tenants {
					name := fmt.Sprintf("t%d", i)
					d.names = append(d.names, name)
					c := TenantConfig{Weight: []int64{1, 2, 3, 5}[i%4], MaxQueued: 8, MaxRunning: 3}
					for _, im := range []impl{s, o} {
						if err := im.AddTenant(name, c); err != nil {
							t.Fatal(err)
						}
					}
				}
				for range 3000 {
					d.step([]impl{s, o})
				}
				for _, l := range d.log {
					for _, ev := range traceEvents {
						if strings.Contains(l, ev) {
							seen[ev]++
						}
					}
				}
			}
		})
	}
	for _, ev := range traceEvents {
		if seen[ev] == 0 {
			t.Errorf("the traces never produced %q: they test too little", ev)
		}
	}
}

// traceEvents must each occur in the random traces, or they prove little.
var traceEvents = []string{"Reserved:true", "Reserved:false", "→ false", "queue full", "Global:true",
	"more than the total capacity", "already queued or running", "unknown tenant", "tenant has queued", "remove t", "update t", "cancel k"}

// scale shrinks a test's repetitions under -short and -race.
func scale(n int) int {
	if testing.Short() || raceEnabled {
		return max(n/8, 2)
	}
	return n
}

// TestReplayIsDeterministic runs each random trace twice on fresh
// schedulers: the decision logs must be identical.
func TestReplayIsDeterministic(t *testing.T) {
	for seed := range uint64(scale(30)) {
		var logs [2][]string
		for i := range logs {
			s, err := New(Config{Capacity: traceCapacity, MaxQueued: 400, ReserveAfter: 2})
			if err != nil {
				t.Fatal(err)
			}
			d := newDriver(t, seed)
			for range 3000 {
				d.step([]impl{s})
			}
			logs[i] = d.log
		}
		if !reflect.DeepEqual(logs[0], logs[1]) {
			for i := range logs[0] {
				if logs[0][i] != logs[1][i] {
					t.Fatalf("seed %d step %d differs:\n %s\n %s", seed, i, logs[0][i], logs[1][i])
				}
			}
		}
		nexts := 0
		for _, l := range logs[0] {
			if strings.Contains(l, "→ true") {
				nexts++
			}
		}
		if nexts < 100 {
			t.Fatalf("seed %d: only %d tasks started; the trace exercises too little", seed, nexts)
		}
	}
}
