package oci

import (
	"fmt"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/sandbox"
)

// In-sandbox paths.
const (
	agentPath = "/.wovyr/agent"      // the read-only bind of wovyr-guest
	workDir   = sandbox.WorkspaceDir // the job's working directory
	guestPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// ociVersion is the spec version written: crun 1.8 refuses newer ones, and
// nothing used here is newer than 1.0.2.
const ociVersion = "1.0.2"

// specParams is everything one sandbox's spec depends on.
type specParams struct {
	rootfs  string // merged root filesystem (host path)
	agent   string // host path of the wovyr-guest copy
	cgroups string // absolute cgroupsPath, e.g. /wovyr/_pool/<id>
	ids     idmap.Range
	limits  sandbox.Limits // the template's shape, defaults applied
	gvisor  bool
	ceil    rlimitCeilings // hard rlimits above the template's (zero: none)
}

// maskedPaths and readonlyPaths are the kernel interfaces a sandbox must not
// read or write (the runc/moby defaults plus /proc/kallsyms and /sys/firmware).
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/proc/kallsyms", "/sys/firmware", "/sys/devices/virtual/powercap", "/sys/kernel/debug",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// buildSpec generates the OCI config for one sandbox. The process is the
// agent; the workload is whatever job it is sent later.
func buildSpec(p specParams) (*specs.Spec, error) {
	none := []string{}
	nofile := uint64(p.limits.NoFile)
	s := &specs.Spec{
		Version:  ociVersion,
		Hostname: sandbox.Hostname,
		Root:     &specs.Root{Path: p.rootfs},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{agentPath, "agent"},
			Env:  []string{guestPATH},
			Cwd:  workDir,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none,
			},
			NoNewPrivileges: true,
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: max(nofile, p.ceil.nofile), Soft: nofile},
				{Type: "RLIMIT_FSIZE", Hard: max(uint64(p.limits.Disk), p.ceil.fsize), Soft: uint64(p.limits.Disk)},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
				// Per host uid, and each sandbox has its own range: a second
				// bound on processes, and the one gVisor's Sentry enforces.
				// The agent's threads count too; at the claim it sets the
				// job's budget plus its own count (agent.SetRlimits).
				{Type: "RLIMIT_NPROC", Hard: max(uint64(p.limits.Pids+agent.ThreadReserve), p.ceil.nproc), Soft: uint64(p.limits.Pids + agent.ThreadReserve)},
				{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
			},
			OOMScoreAdj: intPtr(500),
		},
		Mounts: mounts(p),
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: p.ids.HostUID, Size: p.ids.Size}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: p.ids.HostGID, Size: p.ids.Size}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.UserNamespace},
				{Type: specs.CgroupNamespace},
			},
			CgroupsPath: p.cgroups,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: int64Ptr(memoryBudget(p.limits.Memory, p.gvisor)), Swap: int64Ptr(memoryBudget(p.limits.Memory, p.gvisor))},
				Pids:    &specs.LinuxPids{Limit: int64Ptr(int64(pidsBudget(p.limits.Pids, p.gvisor)))},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	sc, err := seccompProfile(s, p.gvisor)
	if err != nil {
		return nil, err
	}
	s.Linux.Seccomp = sc
	return s, nil
}

// rlimitCeilings are the hard rlimits an agent starts with above its
// template's soft ones: what a claim may raise its limits to. The agent,
// the only process before the claim, sets soft and hard to the claim's
// before the job runs; without CAP_SYS_RESOURCE it cannot raise a hard
// limit itself. Zero: hard = soft.
type rlimitCeilings struct{ nofile, fsize, nproc uint64 }

const rlimInfinity = ^uint64(0)

// agentCeilings are the ceilings of a sandbox's spec. runsc applies them
// inside the Sentry; runc and crun apply them with wovyr's own privileges
// (CAP_SYS_RESOURCE may be absent), so there they are capped at wovyr's
// own hard limits when capped is set.
func agentCeilings(capped bool) rlimitCeilings {
	c := rlimitCeilings{nofile: 1 << 20, fsize: rlimInfinity, nproc: rlimInfinity} // nofile: fs.nr_open's default
	if !capped {
		return c
	}
	for _, r := range []struct {
		res int
		v   *uint64
	}{{unix.RLIMIT_NOFILE, &c.nofile}, {unix.RLIMIT_FSIZE, &c.fsize}, {unix.RLIMIT_NPROC, &c.nproc}} {
		var own unix.Rlimit
		if unix.Getrlimit(r.res, &own) == nil {
			*r.v = min(*r.v, own.Max)
		}
	}
	return c
}

// GVisorMemoryOverhead is what the gVisor backend adds to the memory limit
// a tenant asks for: the Sentry's and gofer's own memory (~20 MiB at rest,
// more with the workload's page tables and file caches), which the host
// cgroup counts with the workload's. The limit a tenant sets is its
// workload's on every tier (issue #25: a job peaking at 53 MB passed
// --memory 64M on container and microVM and was OOM-killed on gVisor), as
// the microVM's guest RAM adds GuestOverhead and its CPU quota a quarter
// core for QEMU. docs/API.md states it.
const GVisorMemoryOverhead = 64 << 20

// memoryBudget is the cgroup memory limit for a workload limited to mem.
func memoryBudget(mem int64, gvisor bool) int64 {
	if gvisor && mem > 0 {
		return mem + GVisorMemoryOverhead
	}
	return mem
}

// pidsBudget is the pids.max for a workload allowing n processes: room for
// the agent's threads, and for gVisor room for the Sentry's and gofer's own
// host threads, which the host cgroup counts (DESIGN §5). RLIMIT_NPROC holds
// the workload itself to exactly n.
func pidsBudget(n int, gvisor bool) int {
	if gvisor {
		return n + 256
	}
	return n + agent.ThreadReserve
}

func mounts(p specParams) []specs.Mount {
	tmp := fmt.Sprintf("size=%d", p.limits.Disk)
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmp}},
		{Destination: agentPath, Type: "bind", Source: p.agent, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
	}
	if p.gvisor {
		// runsc mounts its own /sys and cgroupfs views; keep the rest.
		m = append(m[:5], m[7:]...)
	}
	return m
}

func intPtr(v int) *int       { return &v }
func int64Ptr(v int64) *int64 { return &v }
