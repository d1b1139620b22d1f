package oci

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// LintSpec checks a generated spec (and the runtime's global flags) against
// the battery's posture rules (BATTERY.md probes 1, 2, 5, 6, 24, 30–33) and
// returns every weakness found; nil means none. The certify probes run it on
// the real bundle, and on a deliberately weakened copy as positive control.
func LintSpec(s *specs.Spec, runtimeFlags []string) []string {
	var bad []string
	if s.Process == nil || s.Linux == nil {
		return []string{"spec has no process or linux section"}
	}
	if c := s.Process.Capabilities; c != nil {
		for set, caps := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective,
			"permitted": c.Permitted, "inheritable": c.Inheritable, "ambient": c.Ambient} {
			if len(caps) > 0 {
				bad = append(bad, fmt.Sprintf("capabilities in %s set: %s", set, strings.Join(caps, ",")))
			}
		}
	}
	if !s.Process.NoNewPrivileges {
		bad = append(bad, "no_new_privileges is off")
	}
	if s.Process.User.UID == 0 && len(s.Linux.UIDMappings) == 0 {
		bad = append(bad, "root without a user namespace mapping")
	}
	for _, m := range s.Linux.UIDMappings {
		if m.HostID == 0 {
			bad = append(bad, "uid mapping includes host root")
		}
	}
	for _, ns := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace,
		specs.UTSNamespace, specs.MountNamespace, specs.UserNamespace, specs.CgroupNamespace} {
		i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == ns })
		if i < 0 {
			bad = append(bad, fmt.Sprintf("no new %s namespace", ns))
		} else if p := s.Linux.Namespaces[i].Path; p != "" && !(ns == specs.NetworkNamespace && slotNetns(p)) {
			bad = append(bad, fmt.Sprintf("%s namespace joins %s", ns, s.Linux.Namespaces[i].Path))
		}
	}
	r := s.Linux.Resources
	if r == nil || r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit <= 0 {
		bad = append(bad, "no memory limit")
	}
	if r == nil || r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit <= 0 {
		bad = append(bad, "no pids limit")
	}
	if !strings.HasPrefix(s.Linux.CgroupsPath, "/wovyr/") {
		bad = append(bad, fmt.Sprintf("cgroups path %q is not below /wovyr/", s.Linux.CgroupsPath))
	}
	for _, want := range []string{"RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_NPROC"} {
		if !slices.ContainsFunc(s.Process.Rlimits, func(l specs.POSIXRlimit) bool { return l.Type == want }) {
			bad = append(bad, "no "+want)
		}
	}
	if s.Linux.Seccomp == nil {
		bad = append(bad, "no seccomp profile")
	}
	for _, sc := range deniedSyscalls {
		if allowsSyscall(s.Linux.Seccomp, sc) {
			bad = append(bad, "seccomp allows "+sc)
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			bad = append(bad, p+" is not masked")
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		bad = append(bad, "/proc/sys is writable")
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" && m.Destination != agentPath && !slotResolv(m) && !(m.Destination == runnerPath && slices.Contains(m.Options, "ro")) {
			bad = append(bad, fmt.Sprintf("host bind mount %s -> %s", m.Source, m.Destination))
		}
	}
	for _, f := range runtimeFlags {
		for _, risky := range []string{"--network=host", "--net-raw", "--host-uds", "--allow-flag-override", "--profile", "--iouring", "--rootless", "--platform=kvm"} {
			if f == risky || strings.HasPrefix(f, risky+"=") {
				bad = append(bad, "risky runtime flag "+f)
			}
		}
	}
	for k := range s.Annotations {
		if strings.HasPrefix(k, "dev.gvisor.") || strings.HasPrefix(k, "io.katacontainers.") {
			bad = append(bad, "runtime-steering annotation "+k)
		}
	}
	return bad
}
