package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sched"
)

var t0 = time.Unix(1e9, 0)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newAlloc(t *testing.T, inv Inventory) *Allocator {
	t.Helper()
	a, err := NewAllocator(context.Background(), inv, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func task(id, tenant string, n int64) sched.Task {
	return sched.Task{ID: id, Tenant: tenant, Demand: resource.Vector{GPU: n}}
}

// TestOpenNVMLWithoutLibrary: where libnvidia-ml is absent, OpenNVML
// answers ErrNoNVML with the library's name, never a panic or a hang.
func TestOpenNVMLWithoutLibrary(t *testing.T) {
	_, err := OpenNVML("/nonexistent/libnvidia-ml.so.1")
	if !errors.Is(err, ErrNoNVML) || err.Error() != "no NVML: /nonexistent/libnvidia-ml.so.1: library not found" {
		t.Fatalf("OpenNVML of a missing library: %v", err)
	}
	n, err := OpenNVML("")
	if err == nil {
		n.Close()
		t.Skip("this node has NVML: the no-NVML path cannot be seen here")
	}
	if err.Error() != "no NVML: libnvidia-ml.so.1: library not found" {
		t.Fatalf("OpenNVML on a node without the driver: %v", err)
	}
}

// TestNVMLInventory lists the real devices where NVML exists (a GPU node)
// and skips, saying so, where it does not.
func TestNVMLInventory(t *testing.T) {
	n, err := OpenNVML("")
	if errors.Is(err, ErrNoNVML) {
		t.Skipf("no GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	devs, err := n.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("device %s index %d mig %q memory %d health %q pci %q nodes %v", d.UUID, d.Index, d.MIGProfile, d.MemoryBytes, d.Health, d.PCI, d.Nodes)
		if d.UUID == "" || len(d.Nodes) == 0 {
			t.Errorf("device %+v lacks a UUID or nodes", d)
		}
		if (d.MIGProfile == "") != (d.PCI != "") {
			t.Errorf("device %s: a whole GPU has its PCI address, a MIG instance none: %q", d.UUID, d.PCI)
		}
		pids, err := n.Processes(context.Background(), d.UUID)
		t.Logf("  processes %v %v", pids, err)
	}
	if os.Getenv("WOVYR_GPU_EXPECT") != "" && fmt.Sprint(len(devs)) != os.Getenv("WOVYR_GPU_EXPECT") {
		t.Fatalf("%d devices, want %s", len(devs), os.Getenv("WOVYR_GPU_EXPECT"))
	}
}

// TestPlacePerDevice: a 2-GPU task needs two free devices (lowest index
// first); a device belongs to one task at a time; a request that cannot be
// met whole changes nothing.
func TestPlacePerDevice(t *testing.T) {
	a := newAlloc(t, NewFake(3, 16<<30))
	got, ok := a.Place(task("a1", "a", 2))
	if !ok || fmt.Sprint(got) != "[GPU-fake-0 GPU-fake-1]" {
		t.Fatalf("a1: %v %v", got, ok)
	}
	before := fmt.Sprint(a.Snapshot())
	if got, ok := a.Place(task("b1", "b", 2)); ok {
		t.Fatalf("b1 placed on %v with one device free", got)
	}
	if after := fmt.Sprint(a.Snapshot()); after != before {
		t.Fatalf("a failed Place changed the state:\n%s\n%s", before, after)
	}
	if got, ok := a.Place(task("b2", "b", 1)); !ok || fmt.Sprint(got) != "[GPU-fake-2]" {
		t.Fatalf("b2: %v %v", got, ok)
	}
	snap := a.Snapshot()
	for i, want := range []string{"a/a1", "a/a1", "b/b2"} {
		if s := snap[i]; s.State != Assigned || s.Tenant+"/"+s.Task != want {
			t.Fatalf("device %d: %+v, want assigned to %s", i, s, want)
		}
	}
	if devs := a.Devices("b2"); len(devs) != 1 || devs[0].UUID != "GPU-fake-2" || devs[0].Nodes[0].Path != "/dev/nvidia2" {
		t.Fatalf("b2's devices: %+v", devs)
	}
}

// TestPlaceMIGAndMemory: a MIG profile is served only by MIG instances of
// it, a whole-GPU request never by a MIG instance, and a minimum memory
// filters devices.
func TestPlaceMIGAndMemory(t *testing.T) {
	a := newAlloc(t, NewFake(1, 16<<30, "1g.10gb", "1g.10gb", "2g.20gb"))
	if err := a.Want("m", "a", Request{Count: 2, MIGProfile: "1g.10gb"}); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Place(task("m", "a", 2)); !ok || fmt.Sprint(got) != "[MIG-fake-1-0 MIG-fake-1-1]" {
		t.Fatalf("MIG request: %v %v", got, ok)
	}
	if err := a.Want("w", "b", Request{Count: 2}); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Place(task("w", "b", 2)); ok {
		t.Fatalf("2 whole GPUs placed on %v: only one whole GPU exists", got)
	}
	if err := a.Want("big", "b", Request{Count: 1, MinMemoryBytes: 32 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Place(task("big", "b", 1)); ok {
		t.Fatalf("32 GiB request placed on %v", got)
	}
	if err := a.Want("ok", "b", Request{Count: 1, MinMemoryBytes: 16 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Place(task("ok", "b", 1)); !ok || fmt.Sprint(got) != "[GPU-fake-0]" {
		t.Fatalf("16 GiB request: %v %v", got, ok)
	}
}

// TestRequestValidate: malformed requests are ErrBadRequest and BadInput
// with the field, and Want changes nothing for them.
func TestRequestValidate(t *testing.T) {
	for _, c := range []struct {
		r     Request
		field string
	}{
		{Request{Count: -1}, "resources.gpu"},
		{Request{Count: MaxCount + 1}, "resources.gpu"},
		{Request{Count: 1, MinMemoryBytes: -1}, "resources.gpu_min_memory_bytes"},
		{Request{MIGProfile: "1g.10gb"}, "resources.gpu"},
		{Request{Count: 1, MIGProfile: "1G 10GB"}, "resources.gpu_mig_profile"},
	} {
		err := c.r.Validate()
		var se *sandbox.Error
		if !errors.Is(err, ErrBadRequest) || !errors.Is(err, sandbox.BadInput) || !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: %v, want ErrBadRequest on %s", c.r, err, c.field)
		}
	}
	a := newAlloc(t, NewFake(1, 1<<30))
	if err := a.Want("x", "a", Request{Count: -1}); !errors.Is(err, ErrBadRequest) {
		t.Fatal(err)
	}
	if len(a.wants) != 0 {
		t.Fatal("a bad Want was recorded")
	}
}

// TestScrubThenFree: a device is free again only once it shows no
// process; a dirty one is reset and checked again; one that cannot be
// verified clean is quarantined (ErrQuarantined) and never reassigned
// until Unquarantine.
func TestScrubThenFree(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		set        func(f *Fake)
		quarantine string // "" = freed
		resets     string
	}{
		{"clean", func(f *Fake) {}, "", "[]"},
		{"dirty, reset cleans", func(f *Fake) { f.SetProcesses("GPU-fake-0", 42) }, "", "[GPU-fake-0]"},
		{"dirty, no reset", func(f *Fake) {
			f.SetProcesses("GPU-fake-0", 42)
			f.SetReset("GPU-fake-0", ResetUnsupported)
		}, "processes [42] remain; reset: GPU reset not supported: GPU-fake-0", "[]"},
		{"dirty after reset", func(f *Fake) {
			f.SetProcesses("GPU-fake-0", 7)
			f.SetReset("GPU-fake-0", ResetLeavesDirty)
		}, "processes [7] remain after reset", "[GPU-fake-0]"},
		{"list unreadable", func(f *Fake) {
			f.SetListError("GPU-fake-0", errors.New("GPU is lost"))
			f.SetReset("GPU-fake-0", ResetUnsupported)
		}, "process list unreadable: GPU is lost; reset: GPU reset not supported: GPU-fake-0", "[]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake(1, 1<<30)
			a := newAlloc(t, f)
			if _, ok := a.Place(task("k", "a", 1)); !ok {
				t.Fatal("not placed")
			}
			c.set(f)
			err := a.Release(ctx, "k")
			s := a.Snapshot()[0]
			if fmt.Sprint(f.Resets()) != c.resets {
				t.Fatalf("resets %v, want %s", f.Resets(), c.resets)
			}
			if c.quarantine == "" {
				if err != nil || s.State != Free || s.Tenant != "" {
					t.Fatalf("Release: %v, device %+v, want free", err, s)
				}
				return
			}
			if !errors.Is(err, ErrQuarantined) || s.State != Quarantined || s.Reason != c.quarantine || s.Quarantines != 1 {
				t.Fatalf("Release: %v, device %+v, want quarantined for %q", err, s, c.quarantine)
			}
			if got, ok := a.Place(task("next", "b", 1)); ok {
				t.Fatalf("quarantined device reassigned: %v", got)
			}
			if err := a.Unquarantine("GPU-fake-0"); err != nil {
				t.Fatal(err)
			}
			if _, ok := a.Place(task("next", "b", 1)); !ok {
				t.Fatal("not placed after Unquarantine")
			}
		})
	}
	a := newAlloc(t, NewFake(1, 1<<30))
	if err := a.Release(ctx, "nothing"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("Release of an unknown task: %v", err)
	}
	if err := a.Unquarantine("GPU-fake-0"); err == nil || err.Error() != "device GPU-fake-0 is free, not quarantined" {
		t.Fatalf("Unquarantine of a free device: %v", err)
	}
	if err := a.Unquarantine("GPU-none"); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("Unquarantine of an unknown device: %v", err)
	}
}

// TestUnhealthyStartsQuarantined: an unhealthy device is never assigned.
func TestUnhealthyStartsQuarantined(t *testing.T) {
	f := NewFake(2, 1<<30)
	f.SetHealth("GPU-fake-0", "XID 79: fallen off the bus")
	a := newAlloc(t, f)
	if s := a.Snapshot()[0]; s.State != Quarantined || s.Reason != "unhealthy: XID 79: fallen off the bus" {
		t.Fatalf("unhealthy device: %+v", s)
	}
	if got, ok := a.Place(task("k", "a", 1)); !ok || fmt.Sprint(got) != "[GPU-fake-1]" {
		t.Fatalf("placed on %v %v, want GPU-fake-1", got, ok)
	}
}

// TestBusyAtStartQuarantined: a device that shows processes when the
// allocator starts (a previous daemon's invocation outlived it) is not
// handed out.
func TestBusyAtStartQuarantined(t *testing.T) {
	f := NewFake(2, 1<<30)
	f.SetProcesses("GPU-fake-1", 77)
	a := newAlloc(t, f)
	if s := a.Snapshot()[1]; s.State != Quarantined || s.Reason != "at start: processes [77] remain" {
		t.Fatalf("busy device at start: %+v", s)
	}
	if a.Free() != 1 {
		t.Fatalf("%d free, want 1", a.Free())
	}
}

// TestSchedulerPlacesOnDevices: through sched with the Allocator as its
// Placer, a 2-GPU task waits while only one device is free even though the
// vector counts two free (one is scrubbing-quarantined), and the start names
// its devices.
func TestSchedulerPlacesOnDevices(t *testing.T) {
	f := NewFake(3, 1<<30)
	a := newAlloc(t, f)
	s, err := sched.New(sched.Config{Capacity: resource.Vector{CPUMillis: 8000, GPU: 3}, Charge: sched.ChargeDominantShare, Placer: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := s.AddTenant(n, sched.TenantConfig{Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(tk sched.Task) {
		if err := s.Submit(tk, t0); err != nil {
			t.Fatal(err)
		}
	}
	submit(task("a1", "a", 1))
	st, ok := s.Next(s.Free(), t0)
	if !ok || fmt.Sprint(st.Devices) != "[GPU-fake-0]" {
		t.Fatalf("a1: %+v", st)
	}
	f.SetProcesses("GPU-fake-0", 9)
	f.SetReset("GPU-fake-0", ResetUnsupported)
	if err := s.Done("a1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background(), "a1"); !errors.Is(err, ErrQuarantined) {
		t.Fatal(err)
	}
	submit(task("b1", "b", 3))
	submit(task("a2", "a", 2))
	var got []string
	for {
		st, ok := s.Next(s.Free(), t0)
		if !ok {
			break
		}
		got = append(got, st.Task.ID+fmt.Sprint(st.Devices))
	}
	if fmt.Sprint(got) != "[a2[GPU-fake-1 GPU-fake-2]]" {
		t.Fatalf("starts %v, want only a2 on the two clean devices (b1 needs three)", got)
	}
}

// TestAllocatorHammer: many goroutines placing and releasing at once never
// give one device to two tasks (run under -race).
func TestAllocatorHammer(t *testing.T) {
	a := newAlloc(t, NewFake(4, 1<<30))
	var mu sync.Mutex
	owner := map[string]string{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range 200 {
				id := fmt.Sprintf("g%d-%d", g, i)
				devs, ok := a.Place(task(id, fmt.Sprint("t", g), int64(1+i%2)))
				if !ok {
					continue
				}
				mu.Lock()
				for _, d := range devs {
					if o := owner[d]; o != "" {
						t.Errorf("%s given to %s while %s holds it", d, id, o)
					}
					owner[d] = id
				}
				mu.Unlock()
				mu.Lock()
				for _, d := range devs {
					delete(owner, d)
				}
				mu.Unlock()
				if err := a.Release(context.Background(), id); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := a.Free(); n != 4 {
		t.Fatalf("%d devices free after the hammer, want 4", n)
	}
	if s := fmt.Sprint(a.Snapshot()); strings.Contains(s, "assigned") {
		t.Fatalf("devices still assigned: %s", s)
	}
}

// TestSysfsAddress: NVML's bus id (8-digit domain, upper case) becomes the
// sysfs address VFIO binds; the fake's whole GPUs carry theirs to the
// sandbox, MIG instances none.
func TestSysfsAddress(t *testing.T) {
	var b [32]int8
	for i, c := range "00000000:3B:00.0" {
		b[i] = int8(c)
	}
	if got := sysfsAddress(b); got != "0000:3b:00.0" {
		t.Fatalf("sysfsAddress = %q", got)
	}
	a, err := NewAllocator(context.Background(), NewFake(2, 1<<30, "1g.10gb"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var pcis []string
	for i, id := range []string{"t0", "t1", "t2"} {
		req := Request{Count: 1}
		if i == 2 {
			req.MIGProfile = "1g.10gb"
		}
		if err := a.Want(id, "x", req); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.Place(sched.Task{ID: id, Tenant: "x", Demand: resource.Vector{GPU: 1}}); !ok {
			t.Fatalf("%s not placed", id)
		}
		pcis = append(pcis, a.Devices(id)[0].PCI)
	}
	if want := "[0000:01:00.0 0000:02:00.0 ]"; fmt.Sprint(pcis) != want {
		t.Fatalf("PCI addresses %v, want %s", pcis, want)
	}
}
