// Package vmm starts and supervises virtual machines for the microvm
// backend. VMM is the seam: QEMU's microvm machine is the implementation
// here because it is what these nodes have (Firecracker is not packaged);
// another VMM implements the same Spec → Machine contract.
//
// The VMM opens nothing by path: wovyr opens the kernel, initramfs and disks
// and hands QEMU file descriptors (-add-fd, /proc/self/fd), and each control
// port is a socketpair, so the unprivileged VMM needs no access to wovyr's
// state directory and holds no socket another process could reach.
//
// A Machine is supervised, not managed: the package starts the VMM process
// hardened (unprivileged, seccomp sandbox, no default devices, no NIC) in its
// own process group and cgroup, keeps a bounded copy of its console, and
// kills it — the whole group, then whatever is left in its cgroup — when
// asked or when it outlives its caller. It does not create the per-VM
// directory or its disks; the backend owns those.
//
// A VM has no NIC unless Spec.NIC hands it a tap device the caller opened
// (package egress puts that tap inside a per-sandbox network namespace whose
// filtering lives outside the VM); the VMM never opens, creates or
// configures a network device itself, and a VM without one has no network
// path at all.
package vmm

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"sync"
)

// Accel is how guest code runs.
type Accel string

// Accelerators.
const (
	KVM Accel = "kvm" // hardware virtualization
	TCG Accel = "tcg" // QEMU's software emulator
)

// Disk is a raw disk image attached as a virtio block device.
type Disk struct {
	Path     string
	Serial   string // visible to the guest (/sys/block/vdX/serial); at most 20 bytes
	ReadOnly bool   // enforced by the VMM: the guest cannot write it even as root
}

// Port is a virtio-serial port. Its host side is one end of a socketpair
// (Machine.Port): no socket path exists that anything else could connect to.
type Port struct {
	Name string // the guest sees /sys/class/virtio-ports/*/name
}

// Limits bound the VMM process (and so the guest) on the host through a
// cgroup. Zero fields leave that controller unlimited, which Spec.Validate
// refuses unless Unlimited is set (benchmarks of a bare VMM only).
type Limits struct {
	Memory int64   // bytes: guest RAM plus the VMM's own overhead
	Pids   int     // threads of the VMM process
	CPUs   float64 // CPU bandwidth in cores (cfs quota)
	// NoFile and FileSize are the VMM's RLIMIT_NOFILE and RLIMIT_FSIZE;
	// zero: 256 descriptors and the largest writable disk's size.
	NoFile    uint64
	FileSize  uint64
	Unlimited bool
}

// Spec describes one VM.
type Spec struct {
	// ID names the VM's cgroup and process; [a-z0-9-], ≤ 63 bytes.
	ID      string
	Kernel  string // an uncompressed ELF kernel (PVH boot)
	Initrd  string
	Cmdline string
	Accel   Accel
	CPUs    int   // zero: 1
	Memory  int64 // guest RAM in bytes; zero: 256 MiB
	Disks   []Disk
	Ports   []Port
	// NIC is the VM's one network device; nil (the default): none.
	NIC *NIC
	// ConsoleBytes is how much of the serial console is kept; the rest is
	// read and dropped. Zero: 64 KiB.
	ConsoleBytes int64
	// UID and GID run the VMM unprivileged. Zero UID runs it as the caller,
	// which Validate refuses unless AllowRoot (bare benchmarks only).
	UID, GID  uint32
	AllowRoot bool
	// NoSandbox drops QEMU's seccomp sandbox (bare benchmarks, and the
	// battery's weakened positive control). Zero: sandboxed.
	NoSandbox bool
	Limits    Limits
	// RAM, if set, backs guest RAM with this memfd (a memory-backend-file
	// on /proc/self/fd, so QEMU opens no path of wovyr's) and gives the VM
	// a QMP channel on a socketpair (Machine.Save). Shared, the guest's
	// writes land in it: a golden capture. Private (the default), they are
	// copy-on-write in the VMM and never reach it: a clone, whose golden
	// memfd is sealed against writes besides (package snapshot). Its size
	// must be Memory.
	RAM       *os.File
	SharedRAM bool
	// Incoming restores the VM from this migration stream instead of
	// booting the kernel: device state only, RAM being RAM's content, or,
	// without RAM, device state and RAM both (a paused VM, Machine.SaveAll).
	Incoming *os.File
	// Control gives the VM a QMP channel on a socketpair (Machine.SaveAll)
	// even without RAM or Incoming, which imply one.
	Control bool
	// VFIO are host PCI devices (sysfs addresses, already bound to
	// vfio-pci, package vfio) passed through to the guest: the machine
	// gets a PCIe host bridge, each device a vfio-pci function, and the VMM
	// an RLIMIT_MEMLOCK of the guest's RAM (VFIO pins all of it for DMA).
	// KVM only. Nil (the default): none.
	VFIO []string
}

// control reports whether the VM gets a QMP channel: one whose state can be
// saved or is restored.
func (s *Spec) control() bool { return s.Control || s.RAM != nil || s.Incoming != nil }

// idRE and portRE are compiled on first use: most wovyr processes start
// no VM, and compiling the bounded repetitions cost each 0.1 ms at start.
var idRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`) })

// Validate checks s without side effects.
func (s *Spec) Validate() error {
	switch {
	case !idRE().MatchString(s.ID):
		return fmt.Errorf("vmm: id %q must match %s", s.ID, idRE())
	case s.Kernel == "":
		return fmt.Errorf("vmm: a kernel is required")
	case s.Accel != KVM && s.Accel != TCG:
		return fmt.Errorf("vmm: accel %q must be kvm or tcg", s.Accel)
	case s.UID == 0 && !s.AllowRoot:
		return fmt.Errorf("vmm: refusing to run the VMM as root (set UID/GID)")
	case !s.Limits.Unlimited && (s.Limits.Memory <= 0 || s.Limits.Pids <= 0 || s.Limits.CPUs <= 0):
		return fmt.Errorf("vmm: memory, pids and cpu limits are required")
	}
	for _, d := range s.Disks {
		if len(d.Serial) > 20 || !idRE().MatchString(d.Serial) {
			return fmt.Errorf("vmm: disk serial %q must match %s and be at most 20 bytes", d.Serial, idRE())
		}
	}
	for _, p := range s.Ports {
		if !portRE().MatchString(p.Name) {
			return fmt.Errorf("vmm: port %q must match %s", p.Name, portRE())
		}
	}
	if err := s.validateVFIO(); err != nil {
		return err
	}
	if err := s.validateRAM(); err != nil {
		return err
	}
	if s.NIC != nil {
		return s.NIC.validate()
	}
	return nil
}

// vfioAddrRE is a PCI address in sysfs form.
var vfioAddrRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`) })

func (s *Spec) validateVFIO() error {
	if len(s.VFIO) == 0 {
		return nil
	}
	if s.Accel != KVM {
		return fmt.Errorf("vmm: VFIO passthrough needs KVM, not %s", s.Accel)
	}
	if s.RAM != nil || s.Incoming != nil {
		return fmt.Errorf("vmm: a VM with passed-through devices is never snapshotted nor restored")
	}
	for _, a := range s.VFIO {
		if !vfioAddrRE().MatchString(a) {
			return fmt.Errorf("vmm: VFIO device %q must be a PCI address like 0000:01:00.0", a)
		}
	}
	return nil
}

// MemlockFor is the RLIMIT_MEMLOCK a VM of guest RAM mem with VFIO
// devices needs: all of its RAM plus room for QEMU's own pinned buffers.
func MemlockFor(mem int64) uint64 { return uint64(mem) + 64<<20 }

func (s *Spec) validateRAM() error {
	if s.RAM == nil {
		if s.SharedRAM {
			return fmt.Errorf("vmm: shared RAM needs Spec.RAM")
		}
		return nil
	}
	st, err := s.RAM.Stat()
	if err != nil {
		return fmt.Errorf("vmm: RAM: %w", err)
	}
	if st.Size() != s.memory() {
		return fmt.Errorf("vmm: RAM file holds %d bytes; the guest has %d", st.Size(), s.memory())
	}
	return nil
}

// memory is the guest's RAM in bytes.
func (s *Spec) memory() int64 {
	if s.Memory == 0 {
		return 256 << 20
	}
	return s.Memory
}

// NIC is a virtio-net device on the microvm's virtio-mmio bus whose host
// side is an already attached tap: QEMU gets a duplicate of Tap's
// descriptor (-netdev tap,fd=N) and so needs no privilege and no path.
type NIC struct {
	Tap *os.File         // an open /dev/net/tun descriptor attached to a tap (IFF_TAP|IFF_NO_PI); the caller keeps and closes it
	MAC net.HardwareAddr // the guest's address: unicast, locally administered
}

func (n *NIC) validate() error {
	if n.Tap == nil {
		return fmt.Errorf("vmm: a NIC needs an open tap")
	}
	if len(n.MAC) != 6 || n.MAC[0]&1 != 0 || n.MAC[0]&2 == 0 {
		return fmt.Errorf("vmm: NIC MAC %s must be a unicast, locally administered 6-byte address", n.MAC)
	}
	return nil
}

var portRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,62}$`) })

// VMM starts machines.
type VMM interface {
	// Name is the VMM's name ("qemu").
	Name() string
	// Version identifies the VMM build, for the certification key.
	Version(ctx context.Context) (string, error)
	// Start boots spec. ctx bounds the start only, never the machine's life.
	Start(ctx context.Context, spec *Spec) (Machine, error)
}

// Machine is one running VM.
type Machine interface {
	// Pid is the VMM process's host pid.
	Pid() int
	// Done is closed when the VMM process has exited.
	Done() <-chan struct{}
	// Wait waits for the VMM to exit by itself (the guest powered off) and
	// reports how it ended; if ctx ends first it returns ctx's error and the
	// machine keeps running.
	Wait(ctx context.Context) error
	// Kill stops the VMM (the whole process group, then anything left in
	// its cgroup), removes its cgroup and verifies nothing is left. It is
	// idempotent and safe after the VMM exited by itself.
	Kill() error
	// Console returns the kept head of the serial console and QEMU's stderr.
	Console() []byte
	// Port returns the host end of the named virtio-serial port, or nil.
	Port(name string) net.Conn
	// Save stops the guest and writes its device state to w, the stream a
	// clone's Spec.Incoming restores; guest RAM is in Spec.RAM, which must
	// be shared. The machine stays paused until killed. A machine without
	// Spec.RAM cannot be saved.
	Save(ctx context.Context, w *os.File) error
	// SaveAll stops the guest and writes its device state and all of its
	// RAM to w: a paused VM, restored by a Spec with Incoming and no RAM.
	// Any machine with a QMP channel (Spec.Control, RAM or Incoming) can.
	SaveAll(ctx context.Context, w *os.File) error
}
