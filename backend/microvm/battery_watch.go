package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/sandbox"
)

// The host side of a contained probe (battery_guest.go). Inside its VM the
// tenant is root of its own kernel, so whatever the probe does there, the
// verdict rests on what the host sees while it runs: the VMM's host cgroup
// holds memory, pids and CPU bounds and stays within them, no host process
// but the VMM runs as the VM's uid, the host's free memory falls by no
// more than the VM's allotment, a neighbour VM keeps answering, and after
// Destroy nothing of the VM is left.

// watchInterval is how often a hostWatch samples.
const watchInterval = 25 * time.Millisecond

// memSlack is how far beyond a VM's allotment the host's MemAvailable may
// fall before a watch blames the VM: page cache and other tenants on the
// node move it too.
const memSlack = 256 << 20

// watchedBackend is a backend whose sandboxes are watched from the host.
type watchedBackend struct {
	*Backend
	mu      sync.Mutex
	watches []*hostWatch
}

func (b *Backend) watched() *watchedBackend { return &watchedBackend{Backend: b} }

// Prepare implements sandbox.Backend.
func (wb *watchedBackend) Prepare(ctx context.Context, tmpl sandbox.Template) (sandbox.Sandbox, error) {
	s, err := wb.Backend.Prepare(ctx, tmpl)
	if err != nil {
		return nil, err
	}
	vs := s.(*vmSandbox)
	w := &hostWatch{uid: vs.uid, dir: vs.dir, cgroups: map[string]bool{}, nb: wb.Backend.neighbour}
	wb.mu.Lock()
	wb.watches = append(wb.watches, w)
	wb.mu.Unlock()
	return &watchedSandbox{vmSandbox: vs, w: w}, nil
}

// findings are what the watches of every sandbox prepared saw, and a
// summary of the bounds they held.
func (wb *watchedBackend) findings() (bad []string, summary string) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if len(wb.watches) == 0 {
		return []string{"no VM was prepared"}, ""
	}
	var sums []string
	for _, w := range wb.watches {
		bad = append(bad, w.findings...)
		sums = append(sums, w.summary())
	}
	return bad, strings.Join(sums, "; ")
}

type watchedSandbox struct {
	*vmSandbox
	w *hostWatch
}

// Run runs inv while the host watches the VM and pings the neighbour.
func (s *watchedSandbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	stop := s.w.start(ctx)
	res, err := s.vmSandbox.Run(ctx, inv)
	stop()
	return res, err
}

// Destroy destroys the VM and checks that nothing of it is left.
func (s *watchedSandbox) Destroy(ctx context.Context) error {
	err := s.vmSandbox.Destroy(ctx)
	s.w.afterDestroy()
	return err
}

// hostWatch is what the host saw of one VM.
type hostWatch struct {
	uid uint32
	dir string
	nb  func(context.Context) (time.Duration, error) // pings the neighbour VM

	samples, vmmSeen  int
	early             int // samples of the VMM before it joined its cgroup
	peakMem, memMax   int64
	peakPids, pidsMax int64
	cpuMax            string
	cgroups           map[string]bool
	availStart, avail int64 // host MemAvailable at the start, and its least since
	pinged            time.Duration
	findings          []string
}

// start samples until the returned function is called; that function
// also waits for the neighbour's answer, asked while the VM runs.
func (w *hostWatch) start(ctx context.Context) (stop func()) {
	w.availStart = memAvailable()
	w.avail = w.availStart
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	ping := make(chan error, 1)
	go func() {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-quit:
		}
		var err error
		w.pinged, err = w.nb(ctx)
		ping <- err
	}()
	return func() {
		close(quit)
		<-done
		if err := <-ping; err != nil {
			w.flag("the neighbour VM did not answer while this one ran: %v", err)
		}
		w.judge()
	}
}

// flag records a finding once: the sampler sees a lasting one every tick.
func (w *hostWatch) flag(format string, args ...any) {
	if f := fmt.Sprintf(format, args...); !slices.Contains(w.findings, f) {
		w.findings = append(w.findings, f)
	}
}

// sample reads the processes running as the VM's uid and their cgroups.
func (w *hostWatch) sample() {
	w.samples++
	if a := memAvailable(); a > 0 && a < w.avail {
		w.avail = a
	}
	pids := uidProcesses(w.uid)
	if len(pids) > 1 {
		w.flag("%d host processes ran as the VM's uid %d at once (only its VMM may): %v", len(pids), w.uid, pids)
	}
	for _, pid := range pids {
		cg, ok := readVMMCgroup(pid)
		if !ok {
			continue // gone meanwhile, its group with it
		}
		if !strings.Contains(cg.dir, "/"+cgroup.Prefix+"/") {
			// On cgroup v1 QEMU joins its group just after it starts
			// (vmm.QEMU.Start): until then it is in its parent's.
			w.early++
			continue
		}
		w.vmmSeen++
		for _, d := range cg.dirs {
			w.cgroups[d] = true
		}
		w.peakMem, w.peakPids = max(w.peakMem, cg.mem), max(w.peakPids, cg.pids)
		w.memMax, w.pidsMax, w.cpuMax = cg.memMax, cg.pidsMax, cg.cpuMax
	}
}

// vmmCgroup is one reading of a process's cgroup, v1 or v2. A limit that
// is unset ("max", or v1's page-rounded infinity) reads zero.
type vmmCgroup struct {
	dir           string   // the memory controller's directory; "" for the root
	dirs          []string // every controller's
	mem, memMax   int64
	pids, pidsMax int64
	cpuMax        string // "quota period", or "max …" for none
}

func readVMMCgroup(pid int) (vmmCgroup, bool) {
	var cg vmmCgroup
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return cg, false
	}
	const root = "/sys/fs/cgroup"
	paths := map[string]string{} // controller → directory
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[2] == "/" {
			continue
		}
		if f[1] == "" {
			for _, c := range []string{"memory", "pids", "cpu"} {
				paths[c] = filepath.Join(root, f[2])
			}
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = filepath.Join(root, f[1], f[2])
		}
	}
	v2 := paths["memory"] == paths["pids"]
	cg.dir = paths["memory"]
	if cg.dir == "" {
		return cg, true
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if d := paths[c]; d != "" && !slices.Contains(cg.dirs, d) {
			cg.dirs = append(cg.dirs, d)
		}
	}
	unset := func(v int64) int64 {
		if v >= 1<<62 {
			return 0
		}
		return v
	}
	cg.pids, _ = cgroupInt(paths["pids"], "pids.current")
	cg.pidsMax, _ = cgroupInt(paths["pids"], "pids.max")
	if v2 {
		cg.mem, _ = cgroupInt(cg.dir, "memory.current")
		cg.memMax, _ = cgroupInt(cg.dir, "memory.max")
		if b, err := os.ReadFile(filepath.Join(paths["cpu"], "cpu.max")); err == nil {
			cg.cpuMax = strings.TrimSpace(string(b))
		}
		return cg, true
	}
	cg.mem, _ = cgroupInt(cg.dir, "memory.usage_in_bytes")
	limit, _ := cgroupInt(cg.dir, "memory.limit_in_bytes")
	cg.memMax = unset(limit)
	quota, ok := cgroupInt(paths["cpu"], "cpu.cfs_quota_us")
	period, _ := cgroupInt(paths["cpu"], "cpu.cfs_period_us")
	switch {
	case !ok:
	case quota < 0:
		cg.cpuMax = fmt.Sprintf("max %d", period)
	default:
		cg.cpuMax = fmt.Sprintf("%d %d", quota, period)
	}
	return cg, true
}

// judge turns the samples into findings.
func (w *hostWatch) judge() {
	switch {
	case w.vmmSeen == 0:
		w.flag("the VMM of uid %d was never seen in %d samples", w.uid, w.samples)
		return
	case w.memMax <= 0:
		w.flag("the VMM's cgroup has no memory.max")
	case w.peakMem > w.memMax:
		w.flag("the VMM's cgroup used %d bytes over its memory.max %d", w.peakMem, w.memMax)
	case w.availStart-w.avail > w.memMax+memSlack:
		w.flag("host MemAvailable fell by %d MiB, beyond the VM's %d MiB allotment", (w.availStart-w.avail)>>20, w.memMax>>20)
	}
	if w.pidsMax <= 0 {
		w.flag("the VMM's cgroup has no pids.max")
	} else if w.peakPids > w.pidsMax {
		w.flag("the VMM's cgroup ran %d tasks over its pids.max %d", w.peakPids, w.pidsMax)
	}
	if w.cpuMax == "" || strings.HasPrefix(w.cpuMax, "max") {
		w.flag("the VMM's cgroup has no CPU quota (cpu.max %q)", w.cpuMax)
	}
}

// afterDestroy checks that the VM left no process, cgroup or directory.
func (w *hostWatch) afterDestroy() {
	if pids := uidProcesses(w.uid); len(pids) > 0 {
		w.flag("processes of the VM's uid %d survive Destroy: %v", w.uid, pids)
	}
	for cg := range w.cgroups {
		if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
			w.flag("the VMM's cgroup %s survives Destroy", cg)
		}
	}
	if _, err := os.Stat(w.dir); !errors.Is(err, os.ErrNotExist) {
		w.flag("the VM's directory %s survives Destroy", w.dir)
	}
}

func (w *hostWatch) summary() string {
	s := fmt.Sprintf("VMM peak %d of %d MiB, %d of %d tasks, cpu.max %q, host MemAvailable -%d MiB, neighbour answered in %s, nothing left after Destroy",
		w.peakMem>>20, w.memMax>>20, w.peakPids, w.pidsMax, w.cpuMax, max(w.availStart-w.avail, 0)>>20, w.pinged.Round(time.Millisecond))
	if w.early > 0 {
		s += fmt.Sprintf(" (%d of %d samples caught QEMU starting, before it joined its cgroup v1 groups)", w.early, w.samples)
	}
	return s
}

// uidProcesses lists the host processes (not threads) whose effective
// uid is uid: /proc/<pid> is owned by it.
func uidProcesses(uid uint32) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := os.Stat("/proc/" + e.Name()); err == nil && st.Sys().(*syscall.Stat_t).Uid == uid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupInt reads a one-number cgroup file; "max" is not a number.
func cgroupInt(dir, file string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// memAvailable is the host's MemAvailable in bytes, or 0.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// neighbour pings the suite's neighbour VM (booted on first use, shared by
// every contained probe, destroyed by the suite's Teardown) and returns how
// long its agent took to answer.
func (b *Backend) neighbour(ctx context.Context) (time.Duration, error) {
	b.bat.nbMu.Lock()
	defer b.bat.nbMu.Unlock()
	if b.bat.nb == nil {
		s, err := b.warmSibling().Prepare(ctx, probeTemplate())
		if err != nil {
			return 0, fmt.Errorf("boot the neighbour VM: %w", err)
		}
		b.bat.nb = s.(*vmSandbox)
	}
	b.bat.pings++
	id := "neighbour-" + strconv.Itoa(b.bat.pings)
	var rep agent.VMReply
	t0 := time.Now()
	if err := roundTrip(b.bat.nb.conn, t0.Add(20*time.Second), agent.VMJob{Job: agent.Job{ID: id}}, &rep, 1<<20); err != nil {
		return 0, err
	}
	if rep.ID != id {
		return 0, fmt.Errorf("the neighbour answered for %q, not %q", rep.ID, id)
	}
	return time.Since(t0), nil
}

// teardownNeighbour destroys the neighbour VM, if one was booted.
func (b *Backend) teardownNeighbour() {
	b.bat.nbMu.Lock()
	defer b.bat.nbMu.Unlock()
	if b.bat.nb != nil {
		b.bat.nb.Destroy(context.Background())
		b.bat.nb = nil
	}
}

// warmSibling is b with warm VMs, sharing its probe and disks.
func (b *Backend) warmSibling() *Backend {
	warm := &Backend{cfg: b.cfg, probe: b.probe, disks: b.disks}
	warm.cfg.Warm = true
	return warm
}
