package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// Contained probes (issue #24): the battery's in-sandbox probes run inside
// the guest too, by the prober the guest mounts at agent.GuestAgentPath,
// and each is judged twice. The probe's own judge reads what the job saw
// of the limits the guest applies for the host (the job cgroup's memory
// and pids, the rlimits, the wall deadline: all set by the host's job).
// The host watch (battery_watch.go) judges the boundary itself: a guest's
// root owns its kernel, so only the host side can say the VM stayed inside
// its allotment, left its neighbour answering and left nothing behind.
//
// Positive controls: a limit the host hands the guest has a microVM
// weakness that drops it (weak.go). What separate kernels give — another
// tenant's processes, sockets and files out of reach, a kernel of the
// guest's own serving its system calls — has no VM configuration that
// weakens it, so, as gVisor's own-kernel rows do, those rows' controls run
// the same probe on the container backend's weakened copy for the row
// (the controls argument of Suite), and the record names it.

// guestNative are the process probes whose weakness the microVM builds.
var guestNative = map[int]bool{44: true, 50: true, 51: true, 53: true, 54: true, 55: true, 94: true}

// guestPeer are the process probes whose controls run on the peer.
var guestPeer = map[int]bool{45: true, 47: true, 48: true, 60: true, 70: true}

// guestProbes returns the contained probes; controls is the container
// suite whose weakened backend runs the controls no VM configuration can.
func guestProbes(b *Backend, controls battery.Suite) []battery.Probe {
	peerWeak := map[int]battery.Weakness{}
	for _, p := range controls.Probes {
		peerWeak[p.ID] = p.Weakness
	}
	peer := func(p battery.Probe) battery.Probe {
		p.ControlOn, p.ControlImage = controls.Target.Backend, controls.Target.Image
		if w, ok := peerWeak[p.ID]; ok {
			p.Weakness = w
		}
		return p
	}
	var ps []battery.Probe
	for _, p := range battery.ProcessProbes("microvm") {
		switch {
		case p.ID == 70 && b.cfg.Network != nil:
			// With a NIC, row 70 is the egress suite's (EgressSuite).
		case guestNative[p.ID]:
			ps = append(ps, contained(p))
		case guestPeer[p.ID]:
			ps = append(ps, contained(peer(p)))
		}
	}
	ps = append(ps, contained(battery.Probe{ID: 57, Weakness: battery.NoPidsLimit, Backends: []string{"microvm"}, Run: guestThreads}),
		contained(peer(battery.Probe{ID: 8, Weakness: battery.RunAsRoot, Backends: []string{"microvm"}, Run: guestHostPIDs})))
	for _, a := range battery.KernelAttempts() {
		ps = append(ps, contained(peer(battery.Probe{ID: a.ID, Weakness: battery.RunAsRoot,
			Backends: []string{"microvm"}, Run: guestKernelProbe(a)})))
	}
	return ps
}

// contained runs p's probe and, on the microVM target itself, judges the
// host side of every VM it prepared. A weakened copy (a control) and a
// peer's backend run the probe alone: a control must flag by the probe's
// own judge, the very judge the target passes.
func contained(p battery.Probe) battery.Probe {
	run := p.Run
	p.Run = func(ctx context.Context, t battery.Target) battery.Observation {
		mb, ok := t.Backend.(*Backend)
		if !ok || mb.cfg.weak != "" {
			return run(ctx, t)
		}
		if _, err := mb.probed(ctx); err != nil {
			return battery.Observation{Observed: err.Error()}
		}
		wb := mb.watched()
		wt := t
		wt.Backend = wb
		o := run(ctx, wt)
		bad, summary := wb.findings()
		if len(bad) > 0 {
			o.Secure = false
			o.Observed += "; host: " + strings.Join(bad, "; ")
		} else {
			o.Observed += "; host: " + summary
		}
		return o
	}
	return p
}

// guestKernelProbe runs a's attempt as root of the sandbox's kernel and
// judges which kernel served it: a call may reach the guest's (a VM's
// tenant owns it), never the host's. The sandbox prints its kernel's
// boot_id first; the host compares it with its own, and checks its module
// list did not change. On the container control the calls reach the
// host's kernel, whose boot_id it is.
func guestKernelProbe(a battery.KernelAttempt) func(context.Context, battery.Target) battery.Observation {
	return func(ctx context.Context, t battery.Target) battery.Observation {
		args := slices.Clone(a.Args)
		tried := a.Tried
		if a.ID == 28 {
			pid := strconv.Itoa(os.Getpid())
			args = append(args, pid)
			tried += " (the certifier's, " + pid + ")"
		}
		o := battery.Observation{Tried: tried + ", as root of the sandbox's kernel; compare that kernel's boot_id with the host's"}
		host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err != nil {
			o.Observed = "read the host's boot_id: " + err.Error()
			return o
		}
		modules := moduleNames()
		res, rep, err := runProber(ctx, t, sandbox.Limits{Wall: 2 * time.Minute}, "cat /proc/sys/kernel/random/boot_id; ", args...)
		if err != nil || res.Class != sandbox.OK {
			o.Observed = proberFailure(res, err)
			return o
		}
		lines := bytes.Split(bytes.TrimSpace(res.Stdout), []byte("\n"))
		boot := strings.TrimSpace(string(lines[0]))
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(rep.Data)) {
			parts = append(parts, k+"="+rep.Data[k])
		}
		after := moduleNames()
		same := boot == strings.TrimSpace(string(host))
		o.Observed = fmt.Sprintf("served by kernel boot_id %s (%s): %s", boot, map[bool]string{true: "the host's", false: "not the host's"}[same], strings.Join(parts, " "))
		if !slices.Equal(modules, after) {
			o.Observed += fmt.Sprintf(" (host modules changed: %d loaded before, %d after)", len(modules), len(after))
		}
		o.Secure = rep.Errno == "" && len(boot) == 36 && !same && slices.Equal(modules, after)
		return o
	}
}

// runProber runs the prober with args in a fresh sandbox of t, after
// the shell commands pre (empty: none), and returns its last line's report.
func runProber(ctx context.Context, t battery.Target, lim sandbox.Limits, pre string, args ...string) (*sandbox.Result, prober.Report, error) {
	var rep prober.Report
	sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: t.Image})
	if err != nil {
		return nil, rep, err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	script := pre + "exec " + strings.Join(append(slices.Clone(t.Guest), args...), " ")
	if lim.Wall == 0 {
		lim.Wall = 30 * time.Second
	}
	res, err := sb.Run(ctx, &sandbox.Invocation{ID: sandbox.NewID(), Tenant: "wovyr-battery", Policy: sandbox.Policy{Trust: sandbox.Trusted},
		Limits: lim, Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: t.Image, Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		return nil, rep, err
	}
	lines := bytes.Split(bytes.TrimSpace(res.Stdout), []byte("\n"))
	if json.Unmarshal(lines[len(lines)-1], &rep) != nil || rep.Probe == "" {
		return res, rep, errNoReport
	}
	return res, rep, nil
}

var errNoReport = errors.New("no prober report")

func proberFailure(res *sandbox.Result, err error) string {
	if res == nil {
		return err.Error()
	}
	return fmt.Sprintf("class=%q exit=%d (%v): stdout %.200q stderr %.200q", res.Class, res.ExitCode, err, res.Stdout, res.Stderr)
}

// guestThreads is row 57: 2000 parked OS threads under a pids limit of 64
// stop at it — the Go prober dies unable to create a thread, inside the
// job cgroup of its VM.
func guestThreads(ctx context.Context, t battery.Target) battery.Observation {
	o := battery.Observation{Tried: "pids=64: start 2000 parked OS threads"}
	res, rep, err := runProber(ctx, t, sandbox.Limits{Pids: 64}, "", "threads", "2000")
	if res == nil {
		o.Observed = err.Error()
		return o
	}
	refused := strings.Contains(string(res.Stderr), "failed to create new OS thread")
	first, _, _ := strings.Cut(strings.TrimSpace(string(res.Stderr)), "\n")
	o.Observed = fmt.Sprintf("class=%s exit=%d threads=%d stderr %.160q", res.Class, res.ExitCode, rep.Count, first)
	o.Secure = errors.Is(err, errNoReport) && refused
	return o
}

// guestHostPIDs is row 8: a host process carries a fresh marker in its
// argv; the sandbox scans every /proc/<pid>/cmdline it can see for it (the
// pattern "[w]ovyr…" never matches the grep's own argv).
func guestHostPIDs(ctx context.Context, t battery.Target) battery.Observation {
	mark := "wovyr-mark-hostpid-" + sandbox.NewID()[:12]
	o := battery.Observation{Tried: "a host process runs with " + mark + " in its argv; the sandbox scans /proc/*/cmdline for it"}
	// The shell keeps the mark as its $0; "; true" keeps it from exec'ing
	// sleep in its place.
	host := exec.Command("/bin/sh", "-c", "sleep 60; true", mark)
	host.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := host.Start(); err != nil {
		o.Observed = err.Error()
		return o
	}
	defer func() { syscall.Kill(-host.Process.Pid, syscall.SIGKILL); host.Wait() }()
	res, rep, err := runProber(ctx, t, sandbox.Limits{}, "echo visible=$(grep -l '[w]"+mark[1:]+"' /proc/[0-9]*/cmdline 2>/dev/null | wc -l) pids=$(ls -d /proc/[0-9]* | wc -l); ", "self")
	if err != nil {
		o.Observed = proberFailure(res, err)
		return o
	}
	counts, _, _ := strings.Cut(string(res.Stdout), "\n")
	o.Observed = fmt.Sprintf("%s (as uid %s)", strings.TrimSpace(counts), rep.Data["Uid"])
	o.Secure = strings.HasPrefix(counts, "visible=0 ")
	return o
}

// moduleNames are the host's loaded modules, sorted: their reference
// counts in /proc/modules move with whatever else the node runs.
func moduleNames() []string {
	b, _ := os.ReadFile("/proc/modules")
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names
}

// guestTarget is the battery target of b's contained probes.
func guestTarget(b *Backend) battery.Target {
	return battery.Target{Backend: b, Guest: []string{agent.GuestAgentPath, "probe"}}
}
