package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// Kernel attack surface (BATTERY.md rows 13, 20, 25, 28–36, 38–40): the
// attempts of battery.KernelAttempts, each judged by what came back.
//
// Secure outcome per backend:
//   - container (runc/crun): EPERM from the seccomp profile (seccomp.go,
//     moby's default plus deniedSyscalls), or from the kernel for the calls
//     the profile lets through (no capabilities, own user namespace).
//   - gvisor: the same profile, applied by the Sentry (--oci-seccomp), so
//     EPERM; ENOSYS where the Sentry implements nothing of a call.
//
// The positive control is HostPrivileged (host root, every capability, no
// seccomp) unless a row names a narrower weakness.

// refused are the errnos of a call that never reached the code it targets.
var refused = []string{"EPERM", "EACCES", "ENOSYS"}

// kernelProbes returns the kernel-surface probes for b.
func kernelProbes(b *Backend) []battery.Probe {
	all := func(d map[string]string, prefix string, ok ...string) bool {
		n := 0
		for k, v := range d {
			if strings.HasPrefix(k, prefix) {
				n++
				if !slices.Contains(ok, v) {
					return false
				}
			}
		}
		return n > 0
	}
	ps := []battery.Probe{
		{ID: 13, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(13),
			func(d map[string]string) bool { return all(d, "open_by_handle_at", refused...) })},
		{ID: 20, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(20),
			func(d map[string]string) bool { return all(d, "clone(", refused...) })},
		{ID: 25, Weakness: Privileged, Run: sysProbe(kernelAttempt(25),
			func(d map[string]string) bool {
				return d["CapEff"] == "0000000000000000" && slices.Contains(append([]string{"ENOTSUP"}, refused...), d["setxattr(security.capability)"])
			})},
		{ID: 28, Weakness: HostPIDAsRoot, Run: ptraceProbe},
		{ID: 29, Weakness: Privileged, Run: sysProbe(kernelAttempt(29),
			func(d map[string]string) bool {
				k := d["/proc/keys"]
				return all(d, "keyctl(", refused...) && all(d, "add_key(", refused...) &&
					(strings.HasSuffix(k, " lines=0") || strings.HasPrefix(k, "ENOENT"))
			})},
		{ID: 30, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(30),
			func(d map[string]string) bool { return all(d, "bpf(", refused...) })},
		{ID: 31, Weakness: Privileged, Run: sysProbe(kernelAttempt(31),
			func(d map[string]string) bool { return all(d, "userfaultfd(", refused...) })},
		{ID: 32, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(32),
			func(d map[string]string) bool { return all(d, "io_uring", refused...) })},
		{ID: 33, Weakness: Privileged, Run: sysProbe(kernelAttempt(33),
			func(d map[string]string) bool { return all(d, "perf_event_open", refused...) })},
		{ID: 34, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(34),
			func(d map[string]string) bool {
				return all(d, "init_module", refused...) && all(d, "finit_module", refused...) &&
					all(d, "socket(", append([]string{"EAFNOSUPPORT", "EINVAL"}, refused...)...)
			})},
		{ID: 35, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(35),
			func(d map[string]string) bool {
				return all(d, "", append([]string{"ENOENT"}, refused...)...) && slices.Contains(refused, d["swapon"]) && slices.Contains(refused, d["acct"])
			})},
		{ID: 36, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(36),
			func(d map[string]string) bool { return all(d, "", refused...) })},
		{ID: 38, Weakness: HostPrivileged, Run: sysProbe(kernelAttempt(38),
			func(d map[string]string) bool {
				return all(d, "socket(", append([]string{"EAFNOSUPPORT", "EPROTONOSUPPORT"}, refused...)...)
			})},
		{ID: 39, Weakness: Privileged, Run: sysProbe(kernelAttempt(39), sweepSecure)},
		{ID: 40, Weakness: Privileged, Run: sysProbe(kernelAttempt(40),
			func(d map[string]string) bool {
				return all(d, "x32 ", refused...) && all(d, "int80 unshare", refused...) && all(d, "int80 keyctl", refused...)
			})},
	}
	for i := range ps {
		ps[i].Backends = []string{b.name}
	}
	return ps
}

// kernelNotApplicable gives the kernel-surface rows no configuration of b
// can flip, so they can have no positive control: on runsc the Sentry
// implements nothing of them (measured with HostPrivileged: host root,
// every capability, no seccomp, --net-raw --iouring).
func kernelNotApplicable(b *Backend) map[int]string {
	if !b.gvisor {
		return nil
	}
	return map[int]string{
		13: "runsc's Sentry implements no file handles: open_by_handle_at is EOPNOTSUPP in every configuration, so no host inode is reachable by handle",
		20: "runsc refuses clone(CLONE_NEWCGROUP) with EINVAL even host-privileged, and its cgroupfs is the Sentry's own: CVE-2022-0492's chain cannot start",
		28: "the Sentry keeps one process table per sandbox whatever the spec says: no configuration lets the workload name a host pid (ESRCH even without a pid namespace)",
		30: "runsc's Sentry implements no bpf(2): ENOSYS in every configuration, the host's is never reached",
		31: "runsc's Sentry implements no userfaultfd(2): ENOSYS in every configuration",
		33: "runsc's Sentry implements no perf events: perf_event_open is ENODEV in every configuration",
		35: "runsc's Sentry implements none of kexec_load, reboot, swapon, acct (ENOSYS in every configuration); its syslog and /dev/kmsg are its own boot log",
		36: "runsc's Sentry never sets a clock: settimeofday/adjtimex/clock_adjtime are ENOSYS and clock_settime EPERM in every configuration",
		40: "runsc's Sentry implements neither the x32 nor the i386 (int 0x80) ABI: ENOSYS in every configuration",
	}
}

// sweepDangerous are the syscalls that must not reach the kernel in the
// sweep (row 39): namespaces, mounts, modules, keys, bpf, perf, io_uring,
// userfaultfd, setting clocks, boot and logs, handles (adjtimex and
// clock_adjtime are allowed: with modes 0 they only read; row 36 checks
// that setting fails). Every other number may
// reach it: the expected set is "all but these", since with zero
// arguments every other call the profile allows is harmless.
var sweepDangerous = []string{"syslog", "mount", "umount2", "swapon", "swapoff", "reboot", "sethostname",
	"setdomainname", "init_module", "delete_module", "quotactl", "acct", "settimeofday", "pivot_root",
	"clock_settime", "kexec_load", "kexec_file_load", "add_key", "request_key",
	"keyctl", "unshare", "setns", "perf_event_open", "open_by_handle_at", "finit_module", "bpf", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr", "vhangup"}

func sweepSecure(d map[string]string) bool {
	for _, n := range sweepDangerous {
		if !slices.Contains(refused, d[n]) {
			return false
		}
	}
	return atoi(d["lost"]) < 10
}

// ptraceProbe is row 28: the host passes its own pid; from inside the
// sandbox ptrace, process_vm_readv and kill(0) must find no such process.
// Its control (no pid namespace) finds it and is refused only by
// permissions.
func ptraceProbe(ctx context.Context, t battery.Target) battery.Observation {
	pid := strconv.Itoa(os.Getpid())
	a := kernelAttempt(28)
	a.Tried += " (the certifier's, " + pid + ")"
	a.Args = append(a.Args, pid)
	return sysProbe(a,
		func(d map[string]string) bool {
			return d["ptrace(SEIZE)"] == "ESRCH" && d["process_vm_readv"] == "ESRCH" && d["kill(0)"] == "ESRCH"
		})(ctx, t)
}

// kernelAttempt is row id's attempt.
func kernelAttempt(id int) battery.KernelAttempt {
	for _, a := range battery.KernelAttempts() {
		if a.ID == id {
			return a
		}
	}
	panic(fmt.Sprintf("oci: no kernel attempt for row %d", id))
}

// sysProbe runs the prober with a's arguments in a fresh sandbox and judges
// its report's data with secure.
func sysProbe(a battery.KernelAttempt, secure func(d map[string]string) bool) func(context.Context, battery.Target) battery.Observation {
	tried, args := a.Tried, a.Args
	return func(ctx context.Context, t battery.Target) battery.Observation {
		obs := battery.Observation{Tried: tried}
		s, err := prepared(ctx, t)
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		defer s.Destroy(context.WithoutCancel(ctx))
		modules, _ := os.ReadFile("/proc/modules")
		inv := &sandbox.Invocation{Tenant: "wovyr-battery", Policy: sandbox.Policy{Trust: sandbox.Trusted},
			Limits:   sandbox.Limits{Wall: 30 * time.Second},
			Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: t.Image, Argv: append(slices.Clone(t.Guest), args...)}}
		res, err := s.Run(ctx, inv)
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		lines := bytes.Split(bytes.TrimSpace(res.Stdout), []byte("\n"))
		var rep prober.Report
		if err := json.Unmarshal(lines[len(lines)-1], &rep); err != nil || rep.Probe == "" || res.Class != sandbox.OK {
			obs.Observed = fmt.Sprintf("class=%q exit=%d no report: stdout %.200q stderr %.200q", res.Class, res.ExitCode, res.Stdout, res.Stderr)
			return obs
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(rep.Data)) {
			parts = append(parts, k+"="+rep.Data[k])
		}
		obs.Observed = strings.Join(parts, " ")
		after, _ := os.ReadFile("/proc/modules")
		obs.Secure = rep.Errno == "" && secure(rep.Data) && bytes.Equal(modules, after)
		if !bytes.Equal(modules, after) {
			obs.Observed += " (host /proc/modules changed)"
		}
		return obs
	}
}
