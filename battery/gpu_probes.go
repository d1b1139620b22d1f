package battery

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// AllGPUs: every NVIDIA device node of the host in the sandbox, as
// `--gpus all` would give (rows 95 and 97's positive control).
const AllGPUs Weakness = "all-gpus"

// GPUProbes are rows 95–97 for backends that give sandboxes GPUs through
// device nodes (container, gVisor). They run only where the node has a
// GPU (gpuNotApplicable) and use Target.GPUs, or else this node's NVML
// devices.
//
// Row 96 (residue) cannot write a canary into device memory without CUDA,
// which no battery image carries. It probes what the scrub relies on
// instead (ADR 0026 addendum): tenant A leaves a detached process holding
// its device nodes, and once A's sandbox is destroyed no process that was
// not holding them before may hold them still — the allocator's NVML
// process check then verifies the device before tenant B gets it.
func GPUProbes(backends ...string) []Probe {
	return []Probe{
		{ID: 95, Weakness: AllGPUs, Backends: backends, Run: probeGPUAssignedOnly},
		{ID: 96, Weakness: KeepOrphans, Backends: backends, Run: probeGPUResidue},
		{ID: 97, Weakness: AllGPUs, Backends: backends, Run: probeGPUEnvOverride},
	}
}

// nodeGPUs are the devices the GPU probes assign: Target.GPUs, else this
// node's whole GPUs through NVML (MIG instances only where there are none).
func nodeGPUs(ctx context.Context, t Target) ([]sandbox.GPUDevice, error) {
	if len(t.GPUs) > 0 {
		return t.GPUs, nil
	}
	return nvmlGPUs(ctx)
}

// gpuRun prepares a sandbox holding the first device, runs the prober with
// args (env added) in it and destroys it.
func gpuRun(ctx context.Context, t Target, env []string, args ...string) ([]sandbox.GPUDevice, []sandbox.GPUDevice, guestRun) {
	all, err := nodeGPUs(ctx, t)
	if err != nil {
		return nil, nil, guestRun{err: err}
	}
	assigned := all[:1]
	sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: t.Image, GPUs: assigned})
	if err != nil {
		return assigned, all, guestRun{err: err}
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	inv := probeInvocation(t, sandbox.Limits{}, args...)
	inv.GPUs = assigned
	inv.Workload.Env = append(inv.Workload.Env, env...)
	return assigned, all, runIn(ctx, sb, inv)
}

// forgeTarget is the device a forged node names: another device's own
// node where there is one, else an unassigned minor of the assigned GPU's
// major.
func forgeTarget(assigned, all []sandbox.GPUDevice) sandbox.DeviceNode {
	mine := map[string]bool{}
	for _, n := range nodesOf(assigned) {
		mine[n.Path] = true
	}
	for _, n := range nodesOf(all) {
		if !mine[n.Path] {
			return n
		}
	}
	own := assigned[0].Nodes[0]
	used := map[int64]bool{}
	for _, n := range nodesOf(assigned) {
		if n.Major == own.Major {
			used[n.Minor] = true
		}
	}
	for m := int64(0); ; m++ {
		if !used[m] {
			return sandbox.DeviceNode{Path: fmt.Sprintf("/dev/nvidia%d", m), Major: own.Major, Minor: m}
		}
	}
}

func nodesOf(gpus []sandbox.GPUDevice) []sandbox.DeviceNode {
	var out []sandbox.DeviceNode
	seen := map[string]bool{}
	for _, g := range gpus {
		for _, n := range g.Nodes {
			if !seen[n.Path] {
				seen[n.Path] = true
				out = append(out, n)
			}
		}
	}
	return out
}

func nodePaths(gpus []sandbox.GPUDevice) string {
	var p []string
	for _, n := range nodesOf(gpus) {
		p = append(p, n.Path)
	}
	slices.Sort(p)
	return strings.Join(p, ",")
}

// probeGPUAssignedOnly is row 95: enumerate and open /dev/nvidia*, and a
// node forged with mknod for another device's numbers.
func probeGPUAssignedOnly(ctx context.Context, t Target) Observation {
	obs := Observation{Tried: "list and open /dev/nvidia* and /dev/nvidia-caps/* holding one device; mknod another device's major:minor and open it"}
	all, err := nodeGPUs(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	f := forgeTarget(all[:1], all)
	assigned, _, g := gpuRun(ctx, t, nil, "gpunodes", "/tmp/wovyr-forged-gpu", strconv.FormatInt(f.Major, 10), strconv.FormatInt(f.Minor, 10))
	if g.err != nil {
		obs.Observed = g.String()
		return obs
	}
	obs.Secure, obs.Observed = judgeAssignedOnly(assigned, g.rep)
	obs.Observed += fmt.Sprintf(" (forged %d:%d)", f.Major, f.Minor)
	return obs
}

// judgeAssignedOnly: exactly the assigned devices' nodes visible and
// openable, and the forged node not openable.
func judgeAssignedOnly(assigned []sandbox.GPUDevice, rep prober.Report) (bool, string) {
	want := nodePaths(assigned)
	v, o, f := rep.Data["visible"], rep.Data["openable"], rep.Data["forged"]
	return v == want && o == want && f != "" && f != "opened",
		fmt.Sprintf("visible [%s] openable [%s] forged node: %s; assigned [%s]", v, o, f, want)
}

// probeGPUEnvOverride is row 97: the invocation asks for every device by
// the variables CUDA and NVIDIA's tooling read. (The images wovyr builds
// carry no environment of their own; an image's would reach the workload
// the same way and be replaced the same way.)
func probeGPUEnvOverride(ctx context.Context, t Target) Observation {
	obs := Observation{Tried: "run with NVIDIA_VISIBLE_DEVICES=all CUDA_VISIBLE_DEVICES=all holding one device; list the nodes and the variables"}
	assigned, _, g := gpuRun(ctx, t, []string{"NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=all"}, "gpunodes")
	if g.err != nil {
		obs.Observed = g.String()
		return obs
	}
	obs.Secure, obs.Observed = judgeEnvOverride(assigned, g.rep)
	return obs
}

// judgeEnvOverride: the nodes are the assigned ones and both variables
// name exactly the assigned UUIDs.
func judgeEnvOverride(assigned []sandbox.GPUDevice, rep prober.Report) (bool, string) {
	var uuids []string
	for _, g := range assigned {
		uuids = append(uuids, g.UUID)
	}
	want, ids := nodePaths(assigned), strings.Join(uuids, ",")
	v, n, c := rep.Data["visible"], rep.Data["nvidia"], rep.Data["cuda"]
	return v == want && n == ids && c == ids,
		fmt.Sprintf("visible [%s] NVIDIA_VISIBLE_DEVICES=%s CUDA_VISIBLE_DEVICES=%s; assigned [%s] %s", v, n, c, want, ids)
}

// probeGPUResidue is row 96 as the scrub sees it (GPUProbes): after tenant
// A's sandbox, which left a detached holder of its device nodes, is
// destroyed, no new process holds them.
func probeGPUResidue(ctx context.Context, t Target) Observation {
	obs := Observation{Tried: "tenant A opens its device nodes and leaves a detached holder; after A's sandbox is destroyed, scan the host's descriptors for them"}
	all, err := nodeGPUs(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	nodes := nodesOf(all[:1])
	before := holders(nodes)
	var paths []string
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	_, _, g := gpuRun(ctx, t, nil, append([]string{"gpuhold"}, paths...)...) // destroyed on return
	if g.err != nil {
		obs.Observed = g.String()
		return obs
	}
	left := newHolders(before, holders(nodes))
	obs.Secure = g.rep.Count == len(paths) && len(left) == 0
	obs.Observed = fmt.Sprintf("A held %d of %d nodes; after destroy, new holders %v", g.rep.Count, len(paths), left)
	return obs
}

// holders are the host pids with a descriptor open on one of nodes
// (matched by device number, whatever path it was opened by).
func holders(nodes []sandbox.DeviceNode) map[int]bool {
	want := map[uint64]bool{}
	for _, n := range nodes {
		want[uint64(n.Major)<<32|uint64(n.Minor)] = true
	}
	out := map[int]bool{}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		var st syscall.Stat_t
		if syscall.Stat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			continue
		}
		if want[uint64(unix.Major(st.Rdev))<<32|uint64(unix.Minor(st.Rdev))] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			out[pid] = true
		}
	}
	return out
}

// newHolders are the pids in after that were not in before, in order.
func newHolders(before, after map[int]bool) []int {
	var out []int
	for pid := range after {
		if !before[pid] {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}
