package oci

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/image"
)

// fsProbes are the filesystem, runtime and host-posture rows for the
// container and gvisor backends (3, 4, 14–19, 21, 22, 46, 56, 57), and the
// rows of them that do not apply to b, with why. Each probe runs in fresh
// sandboxes and has a positive control that really flips it. Where the
// runtimes differ: row 4's control is a bind mount on runsc (which refuses
// to donate a host directory fd), row 19 does not apply to runsc for the
// same reason, rows 17 and 21 are runc/crun only (runsc shows no root mount
// flags; the device cgroup row names C only), and row 7 is recorded as host
// posture for gvisor.
func fsProbes(b *Backend) ([]battery.Probe, map[int]string) {
	na := map[int]string{}
	ps := []battery.Probe{
		{ID: 3, Weakness: HostBind, Run: probeRoot},
		{ID: 4, Weakness: LeakedDirFD, Run: probeHostFDs},
		{ID: 14, Weakness: FollowLinks, Run: probeLinks},
		{ID: 15, Weakness: FollowLinks, Run: probeExchangeRace},
		{ID: 18, Weakness: WritableRuntimeCopy, Run: probeRuntimeOverwrite},
		{ID: 16, Weakness: NaiveRootfs, Run: probeMountTargets},
		{ID: 22, Weakness: ExecHealthCheck, Run: probeToolHijack},
		{ID: 46, Weakness: SharedIPC, Run: probeIPC},
		{ID: 56, Weakness: battery.NoRlimits, Run: probeKernelObjects},
		{ID: 57, Weakness: battery.NoPidsLimit, Run: probeThreads},
	}
	if b.gvisor {
		// runsc refuses to donate a host directory (--pass-fd: "importing
		// fds: operation not permitted"); a bind mount makes the gofer
		// hold the host's /etc open instead.
		ps[1].Weakness = HostBind
		// The Sentry's root shows no nosuid/nodev whatever the spec says,
		// so the control for row 17 runs on the container backend (see
		// gvisorControls).
		ps = append(ps, battery.Probe{ID: 17, Weakness: SuidRoot, Run: probeHostileImage})
	} else {
		ps = append(ps, battery.Probe{ID: 19, Weakness: LeakedDirFD, Run: shellProbe("find directory fds of the shell and of pid 1 (runc's CVE-2024-21626 leak) and list through them",
			`for f in /proc/self/fd/* /proc/1/fd/*; do [ -d "$f" ] && echo "DIR $f $(ls $f/ 2>/dev/null | head -3 | tr '\n' ' ')"; done; echo end`,
			func(out string) bool { return strings.TrimSpace(out) == "end" })},
			battery.Probe{ID: 21, Weakness: OpenDeviceCgroup, Run: probeDeviceCgroup},
			// runsc shows no nosuid/nodev on its root: SuidRoot cannot flip
			// row 17 there, which stays open for gvisor (see the report).
			battery.Probe{ID: 17, Weakness: SuidRoot, Run: probeHostileImage})
	}
	if b.gvisor {
		na[7] = hostHygiene()
		na[19] = "the Sentry never hands the workload a host fd: runsc's only way to donate one (--pass-fd) refuses a host directory (\"importing fds: operation not permitted\"), so no configuration can leak the directory fd CVE-2024-21626 needs"
	}
	for i := range ps {
		ps[i].Backends = []string{b.name}
	}
	return ps, na
}

// sandboxRootNames are the top-level entries a sandbox's root may hold: the
// template's, plus the mount points and workspace wovyr adds.
func sandboxRootNames(s *Sandbox) map[string]bool {
	ok := map[string]bool{".wovyr": true, "workspace": true, "tmp": true, "proc": true, "dev": true, "sys": true}
	ents, _ := os.ReadDir(image.RootFS(s.b.imagesDir(), s.image))
	for _, e := range ents {
		ok[e.Name()] = true
	}
	return ok
}

// probeRoot is row 3: the host resolves /proc/<pid>/root and cwd of every
// sandbox process; none is the host's root, and each root lists only the
// template's entries (gVisor's Sentry and gofer: an empty pivot root).
func probeRoot(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host stats and lists /proc/<pid>/root and /proc/<pid>/cwd of every sandbox process"}
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	var hostRoot, hostEtc os.FileInfo
	hostRoot, _ = os.Stat("/")
	hostEtc, _ = os.Stat("/etc")
	allowed := sandboxRootNames(s)
	pids := cgroupProcs(poolCgroup(s.id))
	secure := len(pids) > 0 && hostRoot != nil
	var found []string
	extra := map[string]bool{}
	for _, pid := range pids {
		for _, which := range []string{"root", "cwd"} {
			p := fmt.Sprintf("/proc/%d/%s", pid, which)
			fi, err := os.Stat(p)
			if err != nil {
				continue // gone, or not resolvable: nothing of the host
			}
			if os.SameFile(fi, hostRoot) || os.SameFile(fi, hostEtc) {
				secure = false
				found = append(found, fmt.Sprintf("%d %s is a host directory", pid, which))
			}
		}
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/root", pid))
		for _, e := range ents {
			if !allowed[e.Name()] {
				extra[e.Name()] = true
			}
		}
	}
	if len(extra) > 0 {
		secure = false
		found = append(found, fmt.Sprintf("entries beyond the template: %v", slices.Sorted(maps.Keys(extra))))
	}
	obs.Observed = fmt.Sprintf("%d processes; %s", len(pids), strings.Join(append(found, "end"), "; "))
	obs.Secure = secure
	return obs
}

// fdAllowed classifies one fd of a sandbox process, as the host reads it:
// pipes, anonymous inodes, sockets (their peers: row 10) and memfds are
// the sandbox's own; a path is a leak when it names the host's object at
// that path (same device and inode: a host directory or file), unless it
// is the sandbox's scratch or the agent binary. Paths inside the sandbox's
// own mount namespace (gVisor's /root/…, a container's cgroupfs) read like
// host paths but are other objects. Whatever its name, an fd of the host's
// root or of a directory directly under it (a bind mount's source) leaks.
func fdAllowed(s *Sandbox, hostDirs []os.FileInfo, fd, link string) bool {
	if !strings.HasPrefix(link, "/") {
		for _, p := range []string{"pipe:", "anon_inode:", "socket:", "memfd:"} {
			if strings.HasPrefix(link, p) {
				return true
			}
		}
		return false
	}
	if link == s.b.agent || strings.HasPrefix(link, s.dir+"/") || link == "/dev/null" {
		return true
	}
	theirs, err := os.Stat(fd)
	if err != nil {
		return true // gone
	}
	for _, h := range hostDirs {
		if os.SameFile(theirs, h) {
			return false
		}
	}
	host, err := os.Stat(link)
	return err != nil || !os.SameFile(theirs, host)
}

// hostTopDirs stats the host's root and the directories directly under it.
func hostTopDirs() []os.FileInfo {
	var out []os.FileInfo
	if fi, err := os.Stat("/"); err == nil {
		out = append(out, fi)
	}
	ents, _ := os.ReadDir("/")
	for _, e := range ents {
		if fi, err := os.Stat("/" + e.Name()); err == nil && fi.IsDir() {
			out = append(out, fi)
		}
	}
	return out
}

// probeHostFDs is row 4: the host reads every fd of every sandbox and
// runtime process and classifies it against fdAllowed.
func probeHostFDs(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host readlinks /proc/<pid>/fd/* of every sandbox process and classifies them"}
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	pids := cgroupProcs(poolCgroup(s.id))
	bad := map[string]bool{}
	n, top := 0, hostTopDirs()
	for _, pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fd)
			if err != nil {
				continue
			}
			n++
			if !fdAllowed(s, top, fd, link) {
				bad[link] = true
			}
		}
	}
	obs.Observed = fmt.Sprintf("%d processes, %d fds; outside the allowlist: %v", len(pids), n, slices.Sorted(maps.Keys(bad)))
	obs.Secure = len(pids) > 0 && n > 0 && len(bad) == 0
	return obs
}

// probeDeviceCgroup is row 21 (runc/crun): the sandbox's device cgroup
// denies everything but the standard character devices, and the sandbox
// cannot widen it (devices.allow is on a read-only cgroupfs).
func probeDeviceCgroup(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "host reads the sandbox's devices.list; the sandbox writes 'a *:* rwm' to devices.allow"}
	// Started: the list is read after the run, from a container that is
	// still there.
	s, err := started(ctx, t)
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	res, err := s.Run(ctx, shell(t, `echo 'a *:* rwm' 2>/dev/null > /sys/fs/cgroup/devices/devices.allow && echo WROTE; echo end`))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	var list []string
	for _, d := range cgroupDirs(poolCgroup(s.id)) {
		if b, err := os.ReadFile(filepath.Join(d, "devices.list")); err == nil {
			list = strings.Split(strings.TrimSpace(string(b)), "\n")
		}
	}
	inside := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("devices.list %q; inside %q", list, inside)
	obs.Secure = len(list) > 0 && inside == "end"
	for _, l := range list {
		// Read or write only of named character devices (pty minors may be
		// any); mknod-only wildcards ("c *:* m") grant no access.
		f := strings.Fields(l)
		if len(f) != 3 || f[0] == "a" || f[2] != "m" && (f[0] != "c" || strings.HasPrefix(f[1], "*")) {
			obs.Secure = false
		}
	}
	return obs
}
