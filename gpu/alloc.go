package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sched"
)

// State is where a device is in its life.
type State string

// The states of a device and the legal moves between them:
//
//	free → assigned (Place) → scrubbing (Release) → free | quarantined
//	quarantined → free (Unquarantine)
const (
	Free        State = "free"
	Assigned    State = "assigned"
	Scrubbing   State = "scrubbing"
	Quarantined State = "quarantined"
)

// Allocator assigns devices to tasks, one task (and tenant) per device at
// a time, and scrubs them before they are free again. It implements
// sched.Placer. It is safe for concurrent use; its choices depend only on
// the inventory's order and the calls made.
type Allocator struct {
	inv Inventory
	log *slog.Logger

	mu      sync.Mutex
	slots   []*slot           // inventory order
	wants   map[string]want   // task id → request, registered before Submit
	holding map[string][]int  // task id → slot indexes, while assigned or scrubbing
	qcount  map[string]uint64 // uuid → times quarantined
}

type want struct {
	tenant string
	req    Request
}

type slot struct {
	dev    Device
	state  State
	tenant string
	task   string
	reason string // why quarantined
}

// Assignment is one device's state, for metrics and the API.
type Assignment struct {
	Device Device
	State  State
	Tenant string // holder while assigned or scrubbing
	Task   string
	Reason string // why quarantined
	// Quarantines counts how often the device was quarantined.
	Quarantines uint64
}

var _ sched.Placer = (*Allocator)(nil)

// NewAllocator reads the inventory once. Unhealthy devices start
// quarantined, and so do devices that already show processes (a previous
// daemon's invocations may have outlived it): nothing is handed out that
// was not verified clean.
func NewAllocator(ctx context.Context, inv Inventory, log *slog.Logger) (*Allocator, error) {
	devs, err := inv.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpu inventory: %w", err)
	}
	a := &Allocator{inv: inv, log: log, wants: map[string]want{}, holding: map[string][]int{}, qcount: map[string]uint64{}}
	for _, d := range devs {
		s := &slot{dev: d, state: Free}
		switch {
		case d.Health != "":
			s.state, s.reason = Quarantined, "unhealthy: "+d.Health
		default:
			if dirty := a.dirty(ctx, d.UUID); dirty != "" {
				s.state, s.reason = Quarantined, "at start: "+dirty
			}
		}
		if s.state == Quarantined {
			a.qcount[d.UUID]++
			log.Warn("gpu quarantined at start", "device", d.UUID, "reason", s.reason)
		}
		a.slots = append(a.slots, s)
	}
	return a, nil
}

// Count is the number of devices, quarantined ones included.
func (a *Allocator) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.slots)
}

// Want registers task id's request before the task is submitted to the
// scheduler; Place then honours it. Bad requests change nothing.
func (a *Allocator) Want(id, tenant string, r Request) error {
	if err := r.Validate(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wants[id] = want{tenant, r}
	return nil
}

// Forget drops a request that was never placed (the task was cancelled).
func (a *Allocator) Forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.wants, id)
}

// Place implements sched.Placer: the first Count free devices, in
// inventory order, that match the task's request, all or nothing.
func (a *Allocator) Place(t sched.Task) ([]string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.wants[t.ID]
	if !ok {
		w = want{t.Tenant, Request{Count: t.Demand.GPU}}
	}
	if w.req.Count != t.Demand.GPU || w.req.Count == 0 {
		return nil, false
	}
	var pick []int
	for i, s := range a.slots {
		if s.state == Free && w.req.Matches(s.dev) {
			pick = append(pick, i)
			if int64(len(pick)) == w.req.Count {
				break
			}
		}
	}
	if int64(len(pick)) < w.req.Count {
		return nil, false
	}
	uuids := make([]string, len(pick))
	for k, i := range pick {
		s := a.slots[i]
		s.state, s.tenant, s.task = Assigned, t.Tenant, t.ID
		uuids[k] = s.dev.UUID
	}
	a.holding[t.ID] = pick
	delete(a.wants, t.ID)
	return uuids, true
}

// Devices returns what task id holds, for the sandbox.
func (a *Allocator) Devices(id string) []sandbox.GPUDevice {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []sandbox.GPUDevice
	for _, i := range a.holding[id] {
		d := a.slots[i].dev
		out = append(out, sandbox.GPUDevice{UUID: d.UUID, Nodes: slices.Clone(d.Nodes), PCI: d.PCI})
	}
	return out
}

// Release scrubs the devices task id holds and frees those verified clean;
// the others are quarantined. It answers ErrUnknownTask when id holds
// nothing, and an error matching ErrQuarantined naming the devices that
// were quarantined. ctx bounds the scrub's inventory calls; a device whose
// scrub is cut short is quarantined too.
func (a *Allocator) Release(ctx context.Context, id string) error {
	a.mu.Lock()
	idx, ok := a.holding[id]
	if !ok {
		a.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownTask, id)
	}
	var devs []Device
	for _, i := range idx {
		a.slots[i].state = Scrubbing
		devs = append(devs, a.slots[i].dev)
	}
	a.mu.Unlock()

	// The inventory calls run unlocked: Place goes on for other devices.
	reasons := make([]string, len(devs))
	for k, d := range devs {
		reasons[k] = a.scrub(ctx, d)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.holding, id)
	var errs []error
	for k, i := range idx {
		s := a.slots[i]
		tenant := s.tenant
		s.tenant, s.task = "", ""
		if reasons[k] == "" {
			s.state = Free
			continue
		}
		s.state, s.reason = Quarantined, reasons[k]
		a.qcount[s.dev.UUID]++
		a.log.Error("gpu quarantined: not verified clean", "device", s.dev.UUID, "tenant", tenant, "task", id, "reason", reasons[k])
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrQuarantined, s.dev.UUID, reasons[k]))
	}
	return errors.Join(errs...)
}

// scrub returns "" when d is verified clean, else why not: no process may
// remain; where some do or the list is unreadable the device is reset
// (where it allows) and checked again.
func (a *Allocator) scrub(ctx context.Context, d Device) string {
	dirty := a.dirty(ctx, d.UUID)
	if dirty == "" {
		return ""
	}
	if err := a.inv.Reset(ctx, d.UUID); err != nil {
		return dirty + "; reset: " + err.Error()
	}
	if again := a.dirty(ctx, d.UUID); again != "" {
		return again + " after reset"
	}
	return ""
}

// dirty is "" when d shows no process, else what it shows.
func (a *Allocator) dirty(ctx context.Context, uuid string) string {
	if err := ctx.Err(); err != nil {
		return "scrub cut short: " + err.Error()
	}
	pids, err := a.inv.Processes(ctx, uuid)
	switch {
	case err != nil:
		return "process list unreadable: " + err.Error()
	case len(pids) > 0:
		return fmt.Sprintf("processes %v remain", pids)
	}
	return ""
}

// Unquarantine returns a quarantined device to service (an operator
// verified it). Other states are left alone: ErrUnknownDevice or an error
// naming the state.
func (a *Allocator) Unquarantine(uuid string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.slots {
		if s.dev.UUID != uuid {
			continue
		}
		if s.state != Quarantined {
			return fmt.Errorf("device %s is %s, not quarantined", uuid, s.state)
		}
		s.state, s.reason = Free, ""
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnknownDevice, uuid)
}

// Free is the number of free devices.
func (a *Allocator) Free() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, s := range a.slots {
		if s.state == Free {
			n++
		}
	}
	return n
}

// Snapshot is every device's state, in inventory order.
func (a *Allocator) Snapshot() []Assignment {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Assignment, len(a.slots))
	for i, s := range a.slots {
		out[i] = Assignment{Device: s.dev, State: s.state, Tenant: s.tenant, Task: s.task, Reason: s.reason, Quarantines: a.qcount[s.dev.UUID]}
	}
	return out
}
