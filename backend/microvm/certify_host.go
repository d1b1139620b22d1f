package microvm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/vmm"
)

// findings are what the host sees of one VMM process, by probe.
type findings struct {
	creds, fds, limits, argv []string
}

// inspect reads a VMM's posture from the host's /proc; allowed are the
// directories whose regular files it may hold open.
// inspect reads a VMM's posture. allowed are the directories its regular
// files may come from; nic says the VM has its egress tap, the one
// /dev/net/tun descriptor it may hold (a second would be flagged).
func inspect(pid int, allowed []string, nic bool) findings {
	var f findings
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	tasks, _ := filepath.Glob(filepath.Join(proc, "task", "*", "status"))
	if len(tasks) == 0 {
		f.creds = append(f.creds, "no threads readable")
	}
	seen := map[string]bool{}
	add := func(msg string) {
		if !seen[msg] {
			seen[msg] = true
			f.creds = append(f.creds, msg)
		}
	}
	for _, t := range tasks {
		st := statusFields(t)
		for _, k := range []string{"Uid", "Gid"} {
			if slices.Contains(strings.Fields(st[k]), "0") {
				add(k + " 0 (root)")
			}
		}
		if st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" {
			add("capabilities " + st["CapEff"])
		}
		if st["NoNewPrivs"] != "1" {
			add("NoNewPrivs=" + st["NoNewPrivs"])
		}
		if st["Seccomp"] != "2" {
			add("Seccomp=" + st["Seccomp"])
		}
	}
	f.fds = classifyFDs(proc, allowed, nic)
	f.limits = checkLimits(proc)
	f.argv = lintArgv(proc)
	return f
}

func statusFields(file string) map[string]string {
	out := map[string]string{}
	b, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func classifyFDs(proc string, allowed []string, nic bool) []string {
	ents, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return []string{"fd table unreadable: " + err.Error()}
	}
	var bad []string
	for _, e := range ents {
		p := filepath.Join(proc, "fd", e.Name())
		link, err := os.Readlink(p)
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case strings.HasPrefix(link, "pipe:"), strings.HasPrefix(link, "socket:"), strings.HasPrefix(link, "anon_inode:"),
			slices.Contains([]string{"/dev/null", "/dev/kvm", "/dev/urandom", "/dev/random"}, link):
			continue
		case link == "/dev/net/tun" && nic:
			nic = false // its own tap, once
			continue
		}
		st, err := os.Stat(p)
		inAllowed := slices.ContainsFunc(allowed, func(d string) bool { return strings.HasPrefix(link, d+"/") })
		if err == nil && st.Mode().IsRegular() && inAllowed {
			continue
		}
		bad = append(bad, fmt.Sprintf("fd %s → %s", e.Name(), link))
	}
	return bad
}

func checkLimits(proc string) []string {
	var bad []string
	cg, _ := os.ReadFile(filepath.Join(proc, "cgroup"))
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		path := cgroup.PathIn(string(cg), ctl)
		if !strings.HasPrefix(path, "/"+vmm.CgroupParent+"/") {
			bad = append(bad, ctl+" cgroup is "+strconv.Quote(path)+", not wovyr's")
			continue
		}
		file := map[string]string{"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"}[ctl]
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctl, path, file))
		v := strings.TrimSpace(string(b))
		n, _ := strconv.ParseInt(v, 10, 64)
		if err != nil || v == "max" || n <= 0 || n >= 1<<62 {
			bad = append(bad, fmt.Sprintf("%s %s is %q", ctl, file, v))
		}
	}
	lim, _ := os.ReadFile(filepath.Join(proc, "limits"))
	for _, line := range strings.Split(string(lim), "\n") {
		for name, most := range map[string]int64{"Max open files": 4096, "Max file size": 1 << 40} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			f := strings.Fields(rest) // soft hard [units]
			if len(f) < 2 {
				continue
			}
			soft, err1 := strconv.ParseInt(f[0], 10, 64)
			hard, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil || soft > most || hard > most {
				bad = append(bad, fmt.Sprintf("%s is %s/%s", strings.ToLower(name), f[0], f[1]))
			}
		}
	}
	return bad
}

var (
	tapNetdevRE = regexp.MustCompile(`^tap,id=net0,fd=[0-9]+$`)
	nicDeviceRE = regexp.MustCompile(`^virtio-net-device,netdev=net0,mac=[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)
)

// lintArgv is probe 6: the VMM's real command line.
func lintArgv(proc string) []string {
	b, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return []string{"cmdline unreadable"}
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	var bad []string
	if !slices.Contains(args, "-nodefaults") {
		bad = append(bad, "no -nodefaults")
	}
	if i := slices.Index(args, "-sandbox"); i < 0 || i+1 >= len(args) || args[i+1] != vmm.SandboxOpts {
		bad = append(bad, "no -sandbox "+vmm.SandboxOpts)
	}
	for i, a := range args {
		switch a {
		case "-netdev":
			// The one NIC an egress slot gives (net.go): a tap by
			// descriptor only, no script, helper, ifname or vhost.
			if i+1 >= len(args) || !tapNetdevRE.MatchString(args[i+1]) {
				bad = append(bad, "a -netdev other than a tap by descriptor")
			}
		case "-nic", "-net", "-monitor", "-qmp", "-gdb", "-s", "-virtfs", "-fsdev":
			bad = append(bad, "has "+a)
		case "-incoming":
			// A clone reads its golden's state from a descriptor named
			// over QMP later; never a listening socket or a command.
			if i+1 >= len(args) || args[i+1] != "defer" {
				bad = append(bad, "an -incoming other than defer")
			}
		case "-mon":
			// The QMP channel of a snapshot-capable VM: on a socketpair
			// (the socket chardev rule below), wovyr's end only.
			if i+1 >= len(args) || args[i+1] != "chardev=qmp,mode=control" {
				bad = append(bad, "a -mon other than QMP on its socketpair")
			}
		}
		if (strings.Contains(a, "virtio-net") && !nicDeviceRE.MatchString(a)) || strings.Contains(a, "vhost") {
			bad = append(bad, "a network device: "+a)
		}
		if i > 0 && args[i-1] == "-chardev" && strings.HasPrefix(a, "socket") && !strings.Contains(a, ",fd=") {
			bad = append(bad, "a socket chardev reachable by path: "+a)
		}
	}
	st := statusFields(filepath.Join(proc, "status"))
	if slices.Contains(strings.Fields(st["Uid"]), "0") {
		bad = append(bad, "runs as root")
	}
	return bad
}

// artifactPerms is probe 86's host side: the per-VM directory is 0700 and
// every file in it 0600, owned by root.
func artifactPerms(dir string) []string {
	var bad []string
	st, err := os.Stat(dir)
	if err != nil {
		return []string{"per-VM directory: " + err.Error()}
	}
	if st.Mode().Perm() != 0o700 {
		bad = append(bad, fmt.Sprintf("%s is %o", dir, st.Mode().Perm()))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().Perm()&0o077 != 0 {
			bad = append(bad, fmt.Sprintf("%s is %o", e.Name(), info.Mode().Perm()))
		}
	}
	return bad
}

// hygiene is probe 7: SMT, KSM, swap and CPU vulnerabilities of the host
// under root. The secure outcome is "mitigated, or host flagged", so it
// passes with the flags recorded; the control is a synthetic tree.
func (c *certifier) hygiene(root string) ProbeRecord {
	flags := hostFlags(root)
	obs := "mitigated"
	if len(flags) > 0 {
		obs = "host flagged: " + strings.Join(flags, "; ")
	}
	ctl, _ := os.MkdirTemp("", "wovyr-hygiene-")
	defer os.RemoveAll(ctl)
	vd := filepath.Join(ctl, "sys/devices/system/cpu/vulnerabilities")
	os.MkdirAll(vd, 0o755)
	os.WriteFile(filepath.Join(vd, "spectre_v2"), []byte("Vulnerable\n"), 0o644)
	caught := slices.Contains(hostFlags(ctl), "cpu vulnerability spectre_v2: Vulnerable")
	return ProbeRecord{Probe: 7, Name: "host hygiene", Tried: "read smt/active, ksm/run, /proc/swaps, cpu/vulnerabilities",
		Observed: obs, Pass: true, Control: "a synthetic sysfs with spectre_v2 Vulnerable", ControlCaught: caught}
}

func hostFlags(root string) []string {
	var flags []string
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	if read("sys/devices/system/cpu/smt/active") == "1" {
		flags = append(flags, "SMT active")
	}
	if read("sys/kernel/mm/ksm/run") == "1" {
		flags = append(flags, "KSM on")
	}
	if sw := read("proc/swaps"); strings.Count(sw, "\n") >= 1 {
		flags = append(flags, "swap on")
	}
	vs, _ := filepath.Glob(filepath.Join(root, "sys/devices/system/cpu/vulnerabilities/*"))
	for _, v := range vs {
		if s := read(strings.TrimPrefix(v, root)); strings.HasPrefix(s, "Vulnerable") {
			flags = append(flags, "cpu vulnerability "+filepath.Base(v)+": "+s)
		}
	}
	return flags
}

func fileContains(path, needle string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	n := []byte(needle)
	buf := make([]byte, 0, 2<<20)
	chunk := make([]byte, 1<<20)
	for {
		k, err := r.Read(chunk)
		buf = append(buf, chunk[:k]...)
		if bytes.Contains(buf, n) {
			return true
		}
		if len(buf) > len(n) {
			buf = append(buf[:0], buf[len(buf)-len(n):]...)
		}
		if err == io.EOF {
			return false
		}
		if err != nil {
			return false
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
