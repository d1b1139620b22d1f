package vmm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/internal/childproc"
	"github.com/wovyr/wovyr/sandbox"
)

// QEMU runs VMs on QEMU's microvm machine.
type QEMU struct {
	// Binary is the QEMU system emulator; zero: qemu-system-x86_64 on PATH.
	Binary string
	// Logger receives start and stop events; zero: discarded.
	Logger *slog.Logger
}

// SandboxOpts are QEMU's -sandbox options: its seccomp filter, denying
// obsolete syscalls, privilege changes, fork/exec and resource control.
const SandboxOpts = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

// Name implements VMM.
func (q *QEMU) Name() string { return "qemu" }

// BinaryName is the QEMU binary Start runs: Binary, else
// qemu-system-x86_64 on $PATH.
func (q *QEMU) BinaryName() string { return q.binary() }

func (q *QEMU) binary() string {
	if q.Binary != "" {
		return q.Binary
	}
	return "qemu-system-x86_64"
}

func (q *QEMU) logger() *slog.Logger {
	if q.Logger != nil {
		return q.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Version implements VMM: "QEMU emulator version 7.2.22 (…)" → "qemu 7.2.22 (…)".
func (q *QEMU) Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, q.binary(), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("vmm: %s --version: %w", q.binary(), err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	v := strings.TrimPrefix(strings.TrimSpace(line), "QEMU emulator version ")
	return "qemu " + v, nil
}

// Args is the QEMU command line for s (without the binary). It is exported
// so the battery can lint it (probe 6).
func (q *QEMU) Args(s *Spec) []string {
	cpus, mem := s.CPUs, s.memory()
	if cpus == 0 {
		cpus = 1
	}
	machine := MachineType
	if s.RAM != nil {
		machine += ",memory-backend=ram"
	}
	if len(s.VFIO) > 0 {
		machine += ",pcie=on" // microvm has no PCI bus unless asked
	}
	a := []string{
		"-name", "wovyr-" + s.ID,
		"-machine", machine,
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-msg", "timestamp=off",
		"-smp", strconv.Itoa(cpus),
		"-m", strconv.FormatInt(mem>>20, 10) + "M",
	}
	a = append(a, AccelArgs(s.Accel)...)
	if !s.NoSandbox {
		a = append(a, "-sandbox", SandboxOpts)
	}
	a = append(a, "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con")
	fd := 3 // ExtraFiles, in the order Start opens them
	a = append(a, "-kernel", "/proc/self/fd/"+strconv.Itoa(fd))
	fd++
	if s.Initrd != "" {
		a = append(a, "-initrd", "/proc/self/fd/"+strconv.Itoa(fd))
		fd++
	}
	if s.Cmdline != "" {
		a = append(a, "-append", s.Cmdline)
	}
	for i, d := range s.Disks {
		ro := "off"
		if d.ReadOnly {
			ro = "on"
		}
		id := "d" + strconv.Itoa(i)
		set := strconv.Itoa(i + 1)
		a = append(a, "-add-fd", "fd="+strconv.Itoa(fd)+",set="+set)
		fd++
		if !d.ReadOnly {
			// QEMU's block layer opens the image read-only before it takes
			// write access; an fd set must offer both access modes.
			a = append(a, "-add-fd", "fd="+strconv.Itoa(fd)+",set="+set)
			fd++
		}
		// cache=unsafe: a guest's flush does not become a host fdatasync.
		// No wovyr disk outlives its VM or a host crash: the job and root
		// disks are read-only, scratch is thrown away, and the result disk
		// is read back through the host page cache once QEMU has exited.
		a = append(a,
			"-drive", "id="+id+",file=/dev/fdset/"+set+",format=raw,if=none,discard=ignore,cache=unsafe,readonly="+ro,
			"-device", "virtio-blk-device,drive="+id+",serial="+d.Serial)
	}
	if len(s.Ports) > 0 {
		a = append(a, "-device", "virtio-serial-device,max_ports="+strconv.Itoa(len(s.Ports)+1)) // port 0 is reserved for a console
		for i, p := range s.Ports {
			id := "p" + strconv.Itoa(i)
			a = append(a, "-chardev", "socket,id="+id+",fd="+strconv.Itoa(fd),
				"-device", "virtserialport,chardev="+id+",name="+p.Name)
			fd++
		}
	}
	if s.NIC != nil {
		// No script, helper, ifname or vhost: QEMU only reads and writes
		// the descriptor it is given.
		a = append(a, "-netdev", "tap,id=net0,fd="+strconv.Itoa(fd),
			"-device", "virtio-net-device,netdev=net0,mac="+s.NIC.MAC.String())
		fd++
	}
	for _, addr := range s.VFIO {
		a = append(a, "-device", "vfio-pci,host="+addr)
	}
	if s.RAM != nil {
		share := "off"
		if s.SharedRAM {
			share = "on"
		}
		a = append(a, "-object", "memory-backend-file,id=ram,size="+strconv.FormatInt(mem>>20, 10)+"M,mem-path=/proc/self/fd/"+strconv.Itoa(fd)+",share="+share)
		fd++
	}
	if s.control() {
		a = append(a, "-chardev", "socket,id=qmp,fd="+strconv.Itoa(fd), "-mon", "chardev=qmp,mode=control")
		fd++
	}
	if s.Incoming != nil {
		// Deferred: capabilities are set over QMP first (QEMU 7.2 has no
		// -global for x-ignore-shared); Start then names the stream's
		// descriptor in migrate-incoming.
		a = append(a, "-incoming", "defer")
	}
	return a
}

// openFiles opens what the VMM gets as descriptors, in Args' order, and
// returns the host ends of the port socketpairs (and of QMP's, for a VM
// with Spec.RAM, under the name qmpPort).
func openFiles(s *Spec) (files []*os.File, ports map[string]net.Conn, err error) {
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
		for _, c := range ports {
			c.Close()
		}
	}
	dup := func(f *os.File, name string) error {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("vmm: dup %s: %w", name, err)
		}
		files = append(files, os.NewFile(uintptr(fd), name))
		return nil
	}
	socketpair := func(name string) error {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("vmm: socketpair: %w", err)
		}
		host := os.NewFile(uintptr(fds[0]), "wovyr-port-host")
		c, err := net.FileConn(host)
		host.Close()
		if err != nil {
			syscall.Close(fds[1])
			return fmt.Errorf("vmm: port %s: %w", name, err)
		}
		ports[name] = c
		files = append(files, os.NewFile(uintptr(fds[1]), "wovyr-port-vmm"))
		return nil
	}
	open := func(path string, flag int) error {
		f, err := os.OpenFile(path, flag|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("vmm: %w", err)
		}
		files = append(files, f)
		return nil
	}
	if err := open(s.Kernel, os.O_RDONLY); err != nil {
		return nil, nil, err
	}
	if s.Initrd != "" {
		if err := open(s.Initrd, os.O_RDONLY); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	for _, d := range s.Disks {
		if err := open(d.Path, os.O_RDONLY); err != nil {
			closeAll()
			return nil, nil, err
		}
		if !d.ReadOnly {
			if err := open(d.Path, os.O_RDWR); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
	}
	ports = map[string]net.Conn{}
	for _, p := range s.Ports {
		if err := socketpair(p.Name); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	// Duplicates: Start closes its copies once QEMU holds them.
	if s.NIC != nil {
		if err := dup(s.NIC.Tap, "wovyr-tap"); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	var err2 error
	if s.RAM != nil {
		err2 = dup(s.RAM, "wovyr-ram")
	}
	if err2 == nil && s.control() {
		err2 = socketpair(qmpPort)
	}
	if err2 == nil && s.Incoming != nil {
		err2 = dup(s.Incoming, "wovyr-incoming")
	}
	if err2 != nil {
		closeAll()
		return nil, nil, err2
	}
	return files, ports, nil
}

// qmpPort is QMP's key among openFiles' ports: no virtio-serial port can
// have it (portRE).
const qmpPort = ""

// escapeOpt doubles commas, QEMU's option-value escape.
func escapeOpt(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// Start implements VMM.
func (q *QEMU) Start(ctx context.Context, s *Spec) (Machine, error) {
	if err := s.Validate(); err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "vm spec")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	argv, err := q.argv(s)
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "find the VMM")
	}
	// Rollback stack: undone in reverse unless the VMM starts.
	var undo []func()
	fail := func(err error, what string) (Machine, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s", what)
	}
	var cg *cgroup.Group
	if !s.Limits.Unlimited {
		if cg, err = newCgroup("wovyr-"+s.ID, s.Limits); err != nil {
			return fail(err, "VMM cgroup")
		}
		undo = append(undo, func() { destroyCgroup(cg) })
	}
	keep := s.ConsoleBytes
	if keep == 0 {
		keep = 64 << 10
	}
	m := &machine{cg: cg, console: sandbox.NewSharedCapped(keep), log: q.logger().With("vm", s.ID)}
	files, ports, err := openFiles(s)
	if err != nil {
		return fail(err, "open VM files")
	}
	if c, ok := ports[qmpPort]; ok {
		delete(ports, qmpPort)
		m.qmpConn = c
	}
	m.ports = ports
	undo = append(undo, m.closePorts)
	incoming := 3 + len(files) - 1 // Spec.Incoming's descriptor in the VMM, when it has one
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = files
	cmd.Env = []string{} // nothing of wovyr's environment reaches the VMM
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = m.console, m.console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.UID != 0 {
		cred := &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: []uint32{}}
		if s.Accel == KVM {
			if st, err := os.Stat("/dev/kvm"); err == nil {
				cred.Groups = append(cred.Groups, st.Sys().(*syscall.Stat_t).Gid)
			}
		}
		cmd.SysProcAttr.Credential = cred
	}
	// On cgroup v2 QEMU is born in its group (clone3 CLONE_INTO_CGROUP):
	// not one allocation of it, nor a thread, is ever outside its limits.
	var born *os.File
	if cg != nil && cg.V2Group() {
		if born, err = os.Open(cg.Dirs()[0]); err != nil {
			return fail(err, "open the VMM cgroup")
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(born.Fd())
	}
	// Pdeathsig follows the thread that forks QEMU: childproc holds it.
	child, err := childproc.Start(cmd)
	closeFiles(files) // QEMU holds its copies now
	if born != nil {
		born.Close()
	}
	if err != nil {
		return fail(err, "start "+argv[0])
	}
	m.cmd, m.child = cmd, child
	m.started = time.Now()
	if cg != nil && born == nil {
		// cgroup v1: QEMU has only parsed its arguments by now; everything
		// it allocates for the guest is charged to the cgroup.
		if err := cg.Add(cmd.Process.Pid); err != nil {
			m.Kill()
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "limit the VMM")
		}
	}
	if s.control() {
		if err := m.startQMP(ctx, s, incoming); err != nil {
			m.Kill()
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "%s", tailLine(m.console.Bytes()))
		}
	}
	m.log.Debug("vm started", "pid", cmd.Process.Pid, "accel", s.Accel, "restored", s.Incoming != nil)
	return m, nil
}

// argv is the full command: QEMU by absolute path, behind the prlimit
// prefix unless the spec is unlimited.
func (q *QEMU) argv(s *Spec) ([]string, error) {
	bin, err := exec.LookPath(q.binary())
	if err != nil {
		return nil, err
	}
	argv := append([]string{bin}, q.Args(s)...)
	if s.Limits.Unlimited {
		return argv, nil
	}
	pl, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("prlimit (util-linux): %w", err)
	}
	return append(append([]string{pl}, rlimitArgs(s)...), argv...), nil
}

type machine struct {
	cmd       *exec.Cmd
	child     *childproc.Child // QEMU's process: Done once it is reaped
	cg        *cgroup.Group
	console   *sandbox.SharedCapped
	ports     map[string]net.Conn
	qmpConn   net.Conn // Spec.RAM only: the monitor's host end
	qmpMu     sync.Mutex
	qmp       *qmp
	sharedRAM bool
	log       *slog.Logger
	started   time.Time
	killOnce  sync.Once
	killErr   error
}

func (m *machine) Pid() int              { return m.cmd.Process.Pid }
func (m *machine) Done() <-chan struct{} { return m.child.Done() }
func (m *machine) Console() []byte       { return m.console.Bytes() }
func (m *machine) Port(name string) net.Conn {
	return m.ports[name]
}

func (m *machine) closePorts() {
	for _, c := range m.ports {
		c.Close()
	}
	if m.qmpConn != nil {
		m.qmpConn.Close()
	}
}

func (m *machine) Wait(ctx context.Context) error {
	select {
	case <-m.child.Done():
		return m.child.Wait()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PeakMemory is the VMM cgroup's peak memory use in bytes (0 if unknown);
// read it before Kill.
func PeakMemory(mc Machine) int64 {
	if m, ok := mc.(*machine); ok && m.cg != nil {
		return m.cg.Stats().PeakMemory
	}
	return 0
}

func (m *machine) Kill() error {
	m.killOnce.Do(func() {
		var errs []error
		select {
		case <-m.child.Done():
		default:
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-m.child.Done():
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("vmm: pid %d did not exit after SIGKILL", m.cmd.Process.Pid))
			}
		}
		m.closePorts()
		if m.cg != nil {
			if err := destroyCgroup(m.cg); err != nil {
				errs = append(errs, err)
			}
		}
		m.killErr = errors.Join(errs...)
		m.log.Debug("vm stopped", "after", time.Since(m.started), "err", m.killErr)
	})
	return m.killErr
}

// rlimitArgs bound the VMM's descriptors and the size of any file it
// writes (a guest cannot grow a disk image beyond what wovyr created). It
// is a prlimit(1) prefix that sets the limits on itself and execs QEMU: the
// limits hold from QEMU's first instruction, and lowering one's own limits
// needs no CAP_SYS_RESOURCE, which root may lack in a container.
func rlimitArgs(s *Spec) []string {
	nofile, fsize := s.Limits.NoFile, s.Limits.FileSize
	if nofile == 0 {
		nofile = 256
	}
	if fsize == 0 {
		for _, d := range s.Disks {
			if st, err := os.Stat(d.Path); err == nil && !d.ReadOnly && uint64(st.Size()) > fsize {
				fsize = uint64(st.Size())
			}
		}
		if fsize == 0 {
			fsize = 1 << 20 // nothing to write; QEMU needs no large files
		}
	}
	out := []string{"--nofile=" + strconv.FormatUint(nofile, 10), "--fsize=" + strconv.FormatUint(fsize, 10)}
	if len(s.VFIO) > 0 {
		// Within the daemon's hard limit (the backend checks it first):
		// prlimit runs as the VMM's user and cannot raise it.
		out = append(out, "--memlock="+strconv.FormatUint(MemlockFor(s.memory()), 10))
	}
	return append(out, "--")
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// MachineType is the QEMU machine every wovyr VM runs on.
const MachineType = "microvm,x-option-roms=off"

// AccelArgs are the accelerator and CPU model arguments for a: the guest's
// virtual hardware, which a benchmark's bare peer must share to compare
// like with like.
func AccelArgs(a Accel) []string {
	if a == KVM {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	// A bounded translation cache: TCG's default (1 GiB) would be charged
	// to the VM's memory cgroup as it fills. The max model gives the guest
	// kernel SMEP, SMAP and UMIP.
	return []string{"-accel", "tcg,tb-size=64", "-cpu", "max"}
}
