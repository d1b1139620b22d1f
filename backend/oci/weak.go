package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
)

// Weaknesses of OCI sandboxes beyond battery's shared ones, for the
// positive controls of the container/gvisor probes only.
const (
	// Privileged: CAP_SYS_ADMIN in every set, no seccomp, no NNP.
	Privileged battery.Weakness = "privileged"
	// HostPIDAsRoot: no user and no pid namespace — host root in the
	// host's process table (sandboxes can see and signal each other).
	HostPIDAsRoot battery.Weakness = "host-pid-as-root"
	// HostDevices: the host's /dev/kvm and /dev/mem passed through.
	HostDevices battery.Weakness = "host-devices"
	// Unmasked: no masked or read-only kernel paths.
	Unmasked battery.Weakness = "unmasked"
	// HostBind: the host's /etc bind-mounted at /host-etc.
	HostBind battery.Weakness = "host-bind"
	// WritableProcSys: /proc/sys neither masked nor read-only, and
	// CAP_NET_ADMIN, so the sandbox's own network sysctls are writable.
	WritableProcSys battery.Weakness = "writable-proc-sys"
	// HostPrivileged: host root (no user namespace), every capability, no
	// seccomp, no NNP — `--privileged` without the host's devices; runsc
	// also gets --net-raw and --iouring. The kernel-surface probes' control:
	// their attempts are harmless even here (invalid past the permission
	// check, or objects that die with the sandbox).
	HostPrivileged battery.Weakness = "host-privileged"
	// LeakedDirFD: the runtime hands the container's init an open fd of
	// the host's /etc (runc's CVE-2024-21626 leak, made on purpose).
	LeakedDirFD battery.Weakness = "leaked-dir-fd"
	// OpenDeviceCgroup: the device cgroup allows every device.
	OpenDeviceCgroup battery.Weakness = "open-device-cgroup"
	// FollowLinks: Collect opens workspace paths following symlinks.
	FollowLinks battery.Weakness = "follow-links"
	// WritableRuntimeCopy: a copy of the runtime binary (never the real
	// one) bind-mounted writable at /.wovyr/runtime, owned by the
	// sandbox's root — what CVE-2019-5736 needs.
	WritableRuntimeCopy battery.Weakness = "writable-runtime-copy"
	// SharedIPC: no IPC namespace of its own, and one /dev/shm directory
	// (<run>/wovyr-weak-shm) shared by every sandbox of the configuration.
	SharedIPC battery.Weakness = "shared-ipc"
	// NaiveRootfs: the host makes the agent's mount point in the
	// assembled root following the template's symlinks.
	NaiveRootfs battery.Weakness = "naive-rootfs"
	// ExecHealthCheck: after each job the host runs "<runtime> exec <id>
	// /bin/true" — a host-privileged runtime starting a tenant-writable
	// file, as "docker exec" health checks do.
	ExecHealthCheck battery.Weakness = "exec-health-check"
	// SuidRoot: the root filesystem (template and upper layer) mounted
	// without nosuid and nodev.
	SuidRoot battery.Weakness = "suid-root"
	// HostPathLayers: the root overlay's layers named by their host paths
	// (StateDir/run/oci/sb/<id>/…), which the sandbox's mountinfo shows.
	HostPathLayers battery.Weakness = "host-path-layers"
)

// weaknesses this package can build.
var weaknesses = []battery.Weakness{
	battery.RunAsRoot, battery.NoRlimits, battery.InheritEnv, battery.SharedUID, battery.HostNetwork,
	battery.NoPidsLimit, battery.NoMemoryLimit, battery.NoDiskQuota, battery.NoDeadline, battery.NoOutputCap,
	battery.KeepOrphans, battery.TraceStopAsExit, Privileged, HostPIDAsRoot, HostDevices, Unmasked, HostBind, WritableProcSys, HostPrivileged,
	LeakedDirFD, OpenDeviceCgroup, FollowLinks, WritableRuntimeCopy, SharedIPC, NaiveRootfs,
	ExecHealthCheck, SuidRoot, HostPathLayers, EgressOpen, EgressHostNetns, TenantGolden, NoReexec, KeepLeftovers, battery.PausedAnyTenant,
	battery.AllGPUs,
}

// Weakened implements battery.Weakener: a copy of b with one weakness, for
// positive controls only. Its ConfigHash differs (configHash covers weak),
// so it can never carry b's certification.
func (b *Backend) Weakened(w battery.Weakness) (sandbox.Backend, error) {
	for _, x := range weaknesses {
		if x == w {
			c := b.copyWith(b.cfg, w)
			if c.driver != nil && c.gvisor && w == HostPrivileged {
				d := *c.driver
				d.flags = append(slices.Clone(d.flags), "--net-raw", "--iouring")
				c.driver = &d
			}
			if c.driver != nil && c.gvisor && w == battery.HostNetwork {
				// runsc decides networking by flag, not by the spec.
				d := *c.driver
				d.flags = append([]string{}, d.flags...)
				for i, f := range d.flags {
					if f == "--network=none" {
						d.flags[i] = "--network=host"
					}
				}
				c.driver = &d
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s has no %q configuration", b.name, w)
}

// copyWith is a new Backend over b's runtime, agent and probe answer, with
// cfg and weakness w, and nothing of b's sandboxes, goldens or caches.
func (b *Backend) copyWith(cfg Config, w battery.Weakness) *Backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &Backend{cfg: cfg, name: b.name, strength: b.strength, gvisor: b.gvisor,
		agent: b.agent, runner: b.runner, run: b.run, driver: b.driver, weak: w, ceil: b.ceil}
}

// weakenSpec applies the backend's weakness to a generated spec.
func weakenSpec(s *specs.Spec, w battery.Weakness) {
	dropNS := func(types ...specs.LinuxNamespaceType) {
		var keep []specs.LinuxNamespace
		for _, n := range s.Linux.Namespaces {
			drop := false
			for _, t := range types {
				drop = drop || n.Type == t
			}
			if !drop {
				keep = append(keep, n)
			}
		}
		s.Linux.Namespaces = keep
	}
	switch w {
	case battery.RunAsRoot:
		dropNS(specs.UserNamespace)
		s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
	case HostPIDAsRoot, battery.KeepOrphans:
		dropNS(specs.UserNamespace, specs.PIDNamespace)
		s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
		// Without a pid namespace of its own, procfs is the host's.
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/proc" {
				s.Mounts[i] = specs.Mount{Destination: "/proc", Type: "bind", Source: "/proc", Options: []string{"rbind", "nosuid", "nodev", "noexec"}}
			}
		}
	case battery.HostNetwork:
		dropNS(specs.NetworkNamespace)
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/sys" {
				s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "nodev", "noexec", "ro"}}
			}
		}
	case battery.NoRlimits:
		s.Process.Rlimits = nil
	case battery.NoPidsLimit:
		s.Linux.Resources.Pids = nil
		s.Process.Rlimits = dropRlimit(s.Process.Rlimits, "RLIMIT_NPROC")
	case battery.NoMemoryLimit:
		s.Linux.Resources.Memory = nil
	case battery.NoDiskQuota:
		s.Process.Rlimits = dropRlimit(s.Process.Rlimits, "RLIMIT_FSIZE")
	case HostDevices:
		for _, d := range []struct {
			path         string
			major, minor int64
		}{{"/dev/kvm", 10, 232}, {"/dev/mem", 1, 1}} {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: d.path, Type: "c", Major: d.major, Minor: d.minor, FileMode: fileMode(0o600)})
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &d.major, Minor: &d.minor, Access: "rwm"})
		}
	case battery.AllGPUs:
		allHostGPUs(s)
	case Unmasked:
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	case WritableProcSys:
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
		caps := []string{"CAP_NET_ADMIN"}
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	case OpenDeviceCgroup:
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	case SharedIPC:
		dropNS(specs.IPCNamespace)
		// An mqueue fs can only be mounted from its own IPC namespace.
		var keep []specs.Mount
		for _, m := range s.Mounts {
			if m.Destination != "/dev/mqueue" {
				keep = append(keep, m)
			}
		}
		s.Mounts = keep
	case HostBind:
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host-etc", Type: "bind", Source: "/etc", Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	case HostPrivileged:
		dropNS(specs.UserNamespace)
		s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
		all := allCaps()
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: all, Effective: all, Permitted: all}
		s.Process.NoNewPrivileges = false
		s.Linux.Seccomp = nil
	case Privileged:
		all := []string{"CAP_SYS_ADMIN"}
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: all, Effective: all, Permitted: all}
		s.Process.NoNewPrivileges = false
		s.Linux.Seccomp = nil
	}
}

func dropRlimit(ls []specs.POSIXRlimit, typ string) []specs.POSIXRlimit {
	var out []specs.POSIXRlimit
	for _, l := range ls {
		if l.Type != typ {
			out = append(out, l)
		}
	}
	return out
}

// rootWeakness reports a weakness that runs the sandbox as host root.
func rootWeakness(w battery.Weakness) bool {
	return w == battery.RunAsRoot || w == HostPIDAsRoot || w == battery.KeepOrphans || w == HostPrivileged
}

// allCaps is every capability but CAP_SYS_RESOURCE, which these hosts
// drop from every process's bounding set (so no runtime can grant it).
func allCaps() []string {
	return []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
		"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO",
		"CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
		"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
		"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
		"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"}
}

func fileMode(m os.FileMode) *os.FileMode { return &m }

// leakFD returns, for the LeakedDirFD control only, the extra runtime flags
// and file that pass the host's /etc to the container as fd 3.
func (b *Backend) leakFD() ([]string, *os.File, error) {
	if b.weak != LeakedDirFD {
		return nil, nil, nil
	}
	f, err := os.Open("/etc")
	if err != nil {
		return nil, nil, err
	}
	if b.gvisor {
		return []string{"--pass-fd", "3:3"}, f, nil
	}
	return []string{"--preserve-fds", "1"}, f, nil
}

// sharedShmDir is SharedIPC's /dev/shm, under the run directory; Reconcile
// removes it.
const sharedShmDir = "wovyr-weak-shm"

// runtimeCopyPath is where WritableRuntimeCopy mounts the copy.
const runtimeCopyPath = "/.wovyr/runtime"

// weakFiles prepares what a weakness needs on the host beyond the spec: for
// WritableRuntimeCopy, a copy of the runtime binary in the sandbox's
// scratch (removed with it) and its writable bind mount.
func (s *Sandbox) weakFiles(spec *specs.Spec) error {
	if s.b.weak == SharedIPC {
		shm := filepath.Join(s.b.run, sharedShmDir)
		if err := os.MkdirAll(shm, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(shm, 0o1777); err != nil {
			return err
		}
		for i := range spec.Mounts {
			if spec.Mounts[i].Destination == "/dev/shm" {
				spec.Mounts[i] = specs.Mount{Destination: "/dev/shm", Type: "bind", Source: shm, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}}
			}
		}
		return nil
	}
	if s.b.weak != WritableRuntimeCopy {
		return nil
	}
	src, err := os.ReadFile(s.d.path)
	if err != nil {
		return err
	}
	cp := filepath.Join(s.dir, "runtime-copy")
	if err := os.WriteFile(cp, src, 0o755); err != nil {
		return err
	}
	if err := os.Chown(cp, int(s.slot.ids.HostUID), int(s.slot.ids.HostGID)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "rootfs", runtimeCopyPath), nil, 0o555); err != nil {
		return err
	}
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: runtimeCopyPath, Type: "bind", Source: cp, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	return nil
}

// afterJob runs ExecHealthCheck's health check; for every other
// configuration the host starts nothing in the sandbox after a job.
func (s *Sandbox) afterJob(ctx context.Context) {
	if s.b.weak == ExecHealthCheck {
		_ = s.d.run(ctx, 10*time.Second, "exec", s.id, "/bin/true")
	}
}
