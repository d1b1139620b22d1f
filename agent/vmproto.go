package agent

import (
	"fmt"
	"io"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// The microVM protocol: what the host and the guest init (wovyr-guest init)
// agree on. The transport is either a pair of raw block devices (one-shot:
// the job frame at offset 0 of the job disk, the reply frame at offset 0 of
// the result disk) or a virtio-serial port (warm: frames in both directions).
const (
	// VM disk serials, visible in the guest as /sys/block/vdX/serial. Serials,
	// not names: virtio-mmio devices do not enumerate in a stable order.
	SerialRoot    = "wovyr-root"
	SerialScratch = "wovyr-scratch"
	SerialJob     = "wovyr-job"
	SerialResult  = "wovyr-result"

	// PortControl is the virtio-serial port name of the warm control channel.
	PortControl = "wovyr.ctl"

	// CmdlineMode is the kernel command-line key selecting the guest mode.
	CmdlineMode = "wovyr.mode"
	// CmdlineDebug=1 makes the guest print its boot stages on the console.
	CmdlineDebug = "wovyr.debug"

	// Guest modes.
	ModeOneShot = "oneshot" // run the job disk's job, write the result disk, power off
	ModeWarm    = "warm"    // serve jobs on the control port
	ModeMarker  = "marker"  // print ReadyMarker on the console and power off (probe, bare boot)

	// ReadyMarker is printed on the console by marker mode.
	ReadyMarker = "WOVYR-GUEST-READY"

	// GuestWorkDir is the job's working directory inside the VM: the
	// same path as on every other tier.
	GuestWorkDir = sandbox.WorkspaceDir

	// GuestAgentPath is where a job finds the guest binary, read-only: the
	// path an OCI sandbox mounts it at, so the prober runs alike on both.
	GuestAgentPath = "/.wovyr/agent"
)

// VMJob is a Job plus the in-guest limits the guest init applies with a
// cgroup inside the VM before running it. A VMJob without Argv is a ping:
// the guest answers with an empty VMReply carrying the same ID.
type VMJob struct {
	Job
	Memory int64 `json:"memory,omitempty"` // bytes for the job's cgroup; zero: the VM's RAM bounds it
	Pids   int   `json:"pids,omitempty"`   // tasks in the job's cgroup; zero: unbounded inside the VM
	// Thaw, on a job without Argv, makes a clone restored from a golden
	// snapshot its own before any job: see Thaw.
	Thaw *Thaw `json:"thaw,omitempty"`
	// ClockStep, on a job without Argv, moves the guest's wall clock by
	// this much first: the host's correction after measuring the clock
	// over a ping (a thaw sets it only to within a one-way delay).
	ClockStep time.Duration `json:"clock_step,omitempty"`
}

// Thaw is what a clone needs from the host to stop being a copy of its
// golden snapshot. Every clone of one golden resumes with the same kernel
// RNG state (the kernel reseeds only every 60 s, and -M microvm has no
// vmgenid), the same wall clock, boot_id and machine-id, and the golden's
// network address: the guest mixes Entropy into its RNG and forces a
// reseed, sets the clock, gives the workload root a fresh machine-id and
// boot_id, and readdresses its NIC for the clone's own egress slot.
type Thaw struct {
	Entropy   []byte    `json:"entropy"`    // at least MinThawEntropy host-random bytes
	Clock     time.Time `json:"clock"`      // the host's wall clock as it sent the thaw
	MachineID string    `json:"machine_id"` // 32 lowercase hex digits
	BootID    string    `json:"boot_id"`    // a random UUID, as the kernel writes it
	// Net and MAC are the clone's network (VMNet.String) and NIC address;
	// empty for a VM without a NIC. Golden is the network it was captured
	// with, which the guest removes.
	Net    string `json:"net,omitempty"`
	Golden string `json:"golden_net,omitempty"`
	MAC    string `json:"mac,omitempty"`
}

// MinThawEntropy is the least entropy a thaw may carry: 256 bits.
const MinThawEntropy = 32

// VMReply is a Reply plus what only the guest kernel knows.
type VMReply struct {
	Reply
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Setup is set when the guest could not prepare the job (mounts, cgroup):
	// a backend failure, not the workload's.
	Setup string `json:"setup,omitempty"`
	// Boot is the guest's uptime when it took the job.
	Boot time.Duration `json:"boot,omitempty"`
	// Clock is the guest's wall clock as it answered a ping or a thaw:
	// the host measures the clone's clock by it.
	Clock time.Time `json:"clock,omitzero"`
}

// ReadDiskFrame reads one frame from the start of a disk of size bytes. A
// disk is never trusted: a length beyond the disk or MaxFrame, or bytes that
// do not decode, are errors, never panics or unbounded allocations.
func ReadDiskFrame(r io.ReaderAt, size int64, v any) error {
	var hdr [4]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return fmt.Errorf("agent: read frame header: %w", err)
	}
	n := int64(hdr[0])<<24 | int64(hdr[1])<<16 | int64(hdr[2])<<8 | int64(hdr[3])
	if n == 0 {
		return fmt.Errorf("agent: empty frame (nothing was written)")
	}
	if n > MaxFrame || n > size-4 {
		return fmt.Errorf("agent: frame of %d bytes does not fit a %d-byte disk: %w", n, size, ErrFrameTooLarge)
	}
	return ReadFrame(io.NewSectionReader(r, 0, 4+n), v)
}
