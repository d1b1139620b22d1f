package oci

import (
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// deniedSyscalls are refused to the workload on top of moby's default
// profile: kernel attack surface an untrusted tool never needs (io_uring,
// bpf, userfaultfd, perf, keyrings) and everything that builds or enters
// namespaces and mounts.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"bpf", "userfaultfd", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"mount", "umount", "umount2", "mount_setattr", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "pivot_root",
	"unshare", "setns",
}

// seccompProfile returns moby's default profile for s (it adapts to the
// spec's capabilities, which are none) with deniedSyscalls removed from every
// allow rule and refused with EPERM.
//
// For gVisor, clone3 and syslog are allowed too (see below for clone3): inside runsc it reads the Sentry's own
// boot log, never the host kernel's, and it is how a workload sees that it
// runs on gVisor (dmesg).
func seccompProfile(s *specs.Spec, gvisor bool) (*specs.LinuxSeccomp, error) {
	p, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, fmt.Errorf("oci: default seccomp profile: %w", err)
	}
	var kept []specs.LinuxSyscall
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow {
			sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool { return slices.Contains(deniedSyscalls, n) })
			if len(sc.Names) == 0 {
				continue
			}
		}
		kept = append(kept, sc)
	}
	eperm := uint(1)
	p.Syscalls = append([]specs.LinuxSyscall{{Names: slices.Clone(deniedSyscalls), Action: specs.ActErrno, ErrnoRet: &eperm}}, kept...)
	if gvisor {
		// runsc answers moby's clone3 rule (ENOSYS, so that libc falls
		// back to clone) with EPERM, which makes glibc's pthread_create
		// fail (the wasm runner). The Sentry implements clone3 itself and
		// refuses its namespace flags to a sandbox without capabilities.
		p.Syscalls = append([]specs.LinuxSyscall{{Names: []string{"clone3"}, Action: specs.ActAllow}}, p.Syscalls...)
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"syslog"}, Action: specs.ActAllow})
	}
	return p, nil
}

// allowsSyscall reports whether profile p lets name through unconditionally;
// the certify probes and tests use it to lint a spec.
func allowsSyscall(p *specs.LinuxSeccomp, name string) bool {
	if p == nil {
		return true
	}
	for _, sc := range p.Syscalls {
		if slices.Contains(sc.Names, name) && len(sc.Args) == 0 {
			return sc.Action == specs.ActAllow
		}
	}
	return p.DefaultAction == specs.ActAllow
}
