package microvm

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/vfio"
	"github.com/wovyr/wovyr/vmm"
)

// Config configures the backend. Zero fields take the defaults documented.
type Config struct {
	// StateDir is wovyr's state directory. VMs live in StateDir/microvm,
	// the default image in StateDir/images/microvm and templates' root
	// disks in StateDir/microvm-disks. Required.
	StateDir string
	// ImageDir is the built image (wovyr image build microvm); zero: the
	// default above. Its kernel and initramfs boot every VM, and its root
	// disk is the root of workloads that name no template.
	ImageDir string
	// TemplatesDir is the node's template store (package image), whose
	// templates a workload names as its image; each one's root disk is
	// built on first use into StateDir/microvm-disks (disks.go). Zero:
	// StateDir/images, where `wovyr image build` and `image import` put
	// them.
	TemplatesDir string
	// Guest is this node's wovyr-guest binary. When set, an image whose
	// initramfs carries another guest (one built by another wovyr) is
	// unavailable with a reason that says to rebuild it: its agent would
	// speak another version of the protocol and the battery would judge
	// the wrong guest. Empty: no check.
	Guest string
	// VMM starts the VMs; zero: QEMU from PATH.
	VMM vmm.VMM
	// Accel forces "kvm" or "tcg" (still verified by a probe boot); zero:
	// KVM if a KVM guest boots within KVMProbeTimeout, else TCG.
	Accel vmm.Accel
	// KVMProbeTimeout bounds the KVM probe boot; zero: 10 s.
	KVMProbeTimeout time.Duration
	// BootTimeout bounds a boot to a ready agent, and is the slack the host
	// adds to an invocation's wall limit before it kills a silent guest;
	// zero: 60 s under TCG, 10 s under KVM.
	BootTimeout time.Duration
	// UIDBase and UIDCount are the host uid range VMs run in, one uid and
	// gid of its own per VM, so a compromised VMM cannot signal or trace
	// another. The range must be used by nothing else on the host (nor by
	// another wovyr state directory). Zero: 2113929216 (0x7e000000) and
	// 65536.
	UIDBase, UIDCount uint32
	// SharedUser runs every VM as User instead (weaker; the battery's
	// control for probe 49).
	SharedUser bool
	// User is the shared account for SharedUser; it is created (a system
	// user without login) if absent. Zero: "wovyr-vm".
	User string
	// Warm makes Prepare boot the VM and Run use the control port.
	Warm bool
	// VCPUs per VM; its host CPU quota is this many cores plus a quarter
	// core for QEMU's own threads (vmmCPU). Zero: 1.
	VCPUs int
	// GuestOverhead is guest RAM beyond the invocation's memory limit, for
	// the guest kernel and agent; zero: 128 MiB.
	GuestOverhead int64
	// ExtraCmdline is appended to the guest kernel command line (debugging;
	// tests use it to make a guest that never answers).
	ExtraCmdline string
	// Logger receives lifecycle events; zero: discarded.
	Logger *slog.Logger
	// VFIO is where GPUs are bound for passthrough (KVM only, gpu.go);
	// zero: this node's /sys and /dev.
	VFIO vfio.Host
	// Network gives VMs allowlisted egress through this service: a tap in
	// a per-sandbox egress slot (net.go). Zero: VMs have no NIC and only
	// deny-all policies are accepted.
	Network *egress.Service

	weak    battery.Weakness // a positive control's configuration (Weakened)
	memlock uint64           // tests: the hard RLIMIT_MEMLOCK to assume (gpu.go); zero: this process's
	rig     *egresstest.Rig  // the egress battery's harness (battery_egress.go)
}

func (c Config) withDefaults() (Config, error) {
	if c.StateDir == "" {
		return c, fmt.Errorf("microvm: Config.StateDir is required")
	}
	if c.ImageDir == "" {
		c.ImageDir = ImageDir(c.StateDir)
	}
	if c.TemplatesDir == "" {
		c.TemplatesDir = filepath.Join(c.StateDir, "images")
	}
	if c.VMM == nil {
		c.VMM = &vmm.QEMU{Logger: c.Logger}
	}
	if c.Accel != "" && c.Accel != vmm.KVM && c.Accel != vmm.TCG {
		return c, fmt.Errorf("microvm: Config.Accel %q must be kvm or tcg", c.Accel)
	}
	if c.KVMProbeTimeout == 0 {
		c.KVMProbeTimeout = 10 * time.Second
	}
	if c.UIDBase == 0 {
		c.UIDBase = 0x7e000000
	}
	if c.UIDCount == 0 {
		c.UIDCount = 65536
	}
	if uint64(c.UIDBase)+uint64(c.UIDCount) > 0xfffffffe || c.UIDBase < 1000 {
		return c, fmt.Errorf("microvm: VM uid range %d+%d is not usable", c.UIDBase, c.UIDCount)
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.VCPUs == 0 {
		c.VCPUs = 1
	}
	if c.GuestOverhead == 0 {
		c.GuestOverhead = 128 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// DefaultUser is the account QEMU runs as.
const DefaultUser = "wovyr-vm"

// ImageDir is where `wovyr image build microvm` puts the image.
func ImageDir(stateDir string) string { return filepath.Join(stateDir, "images", "microvm") }

func vmsDir(stateDir string) string { return filepath.Join(stateDir, "microvm") }

// disksDir is the cache of templates' root disks.
func disksDir(stateDir string) string { return filepath.Join(stateDir, "microvm-disks") }

func (c Config) bootTimeout(a vmm.Accel) time.Duration {
	switch {
	case c.BootTimeout != 0:
		return c.BootTimeout
	case a == vmm.KVM:
		return 10 * time.Second
	default:
		return 60 * time.Second
	}
}

func snapshotsDir(stateDir string) string { return filepath.Join(stateDir, "snapshots") }
