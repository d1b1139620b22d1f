package microvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

// Weaknesses of the microvm backend for the battery's positive controls,
// beside battery.RunAsRoot (QEMU as root without -sandbox), SharedUID (all
// VMs as one account), NoRlimits (no cgroup, no rlimits), NoDiskQuota (a
// 512 MiB scratch disk whatever the limit) and NoOutputCap (the caller's
// cap ignored), and the in-guest ones of the contained probes
// (battery_guest.go): NoPidsLimit and NoMemoryLimit (no such limit on the
// job's cgroup in the VM, and for memory a VM of at least weakRAM),
// NoDeadline (the guest agent not told the wall limit) and InheritEnv (the
// host's environment given to the job), TraceStopAsExit (the guest agent
// takes a job leader's ptrace-stop for its exit).
const (
	WeakWorldReadable battery.Weakness = "world-readable-vm-files" // per-VM dir 0755, disks 0644
	WeakReusedScratch battery.Weakness = "reused-scratch-disk"     // a VM gets the previous VM's scratch disk
	// WeakProbeSelf marks probes with no VM knob to weaken (4, 7): the
	// probe weakens its own subject instead.
	WeakProbeSelf battery.Weakness = "probe-self-control"
	// WeakOpenNetwork puts the VM's NIC on the egress harness's upstream
	// network itself, with no slot, table, stub or proxy in between (the
	// egress rows' control, battery_egress.go).
	WeakOpenNetwork battery.Weakness = "unfiltered-nic"
)

var weaknesses = map[battery.Weakness]bool{
	battery.RunAsRoot: true, battery.SharedUID: true, battery.NoRlimits: true,
	battery.NoDiskQuota: true, battery.NoOutputCap: true,
	battery.NoPidsLimit: true, battery.NoMemoryLimit: true, battery.NoDeadline: true, battery.InheritEnv: true,
	battery.TraceStopAsExit: true, battery.PausedAnyTenant: true,
	WeakWorldReadable: true, WeakReusedScratch: true, WeakProbeSelf: true, WeakOpenNetwork: true,
	WeakTenantGolden: true, WeakNoThaw: true,
}

// Weakened implements battery.Weakener: a copy of b with one weakness, for
// positive controls only. Its ConfigHash differs, so it can never carry b's
// certification.
func (b *Backend) Weakened(w battery.Weakness) (sandbox.Backend, error) {
	if !weaknesses[w] {
		return nil, fmt.Errorf("microvm: no %q configuration", w)
	}
	p, err := b.probed(context.Background())
	if err != nil {
		return nil, err
	}
	nb := &Backend{cfg: b.cfg, disks: b.disks}
	nb.cfg.weak = w
	np := *p
	if w == battery.SharedUID {
		nb.cfg.SharedUser = true
		if np.uid, np.gid, err = ensureUser(context.Background(), nb.cfg.User); err != nil {
			return nil, err
		}
	}
	np.cap.ConfigHash = nb.configHash(p.cap.Version, &np)
	np.cap.Features = append(append([]string(nil), p.cap.Features...), "weakened="+string(w))
	nb.probe = &np
	return nb, nil
}

// weakSpec applies the spec-level weaknesses.
func (b *Backend) weakSpec(s *vmm.Spec) {
	switch b.cfg.weak {
	case battery.RunAsRoot:
		s.UID, s.GID, s.AllowRoot, s.NoSandbox = 0, 0, true, true
	case battery.NoRlimits:
		s.Limits = vmm.Limits{Unlimited: true}
	}
}

// guestRAM is the VM's memory for a job's memory limit: the limit plus
// the guest's own overhead. Without a memory limit (NoMemoryLimit, whose
// job cgroup has none) the VM gets at least weakRAM, so that a job can
// outgrow its limit instead of meeting the VM's size.
func (b *Backend) guestRAM(limit int64) int64 {
	if b.cfg.weak == battery.NoMemoryLimit {
		limit = max(limit, weakRAM)
	}
	return limit + b.cfg.GuestOverhead
}

const weakRAM = 512 << 20

// scratchSize is the scratch disk for a disk limit.
func (b *Backend) scratchSize(limit int64) int64 {
	if b.cfg.weak == battery.NoDiskQuota {
		return 512 << 20
	}
	return max(limit, 16<<20)
}

func (b *Backend) reusedScratch() string {
	return filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-reused-scratch.ext4")
}

// weakPrepared applies the per-VM-file weaknesses once the files exist; it
// reports whether the scratch disk was taken from a previous VM.
func (s *vmSandbox) weakPrepared() (reused bool) {
	switch s.b.cfg.weak {
	case WeakWorldReadable:
		os.Chmod(s.dir, 0o755)
		os.Chmod(s.scratch(), 0o644)
	case WeakReusedScratch:
		if os.Rename(s.b.reusedScratch(), s.scratch()) == nil {
			return true
		}
	}
	return false
}

// weakDestroy keeps the scratch disk for the next VM (WeakReusedScratch).
func (s *vmSandbox) weakDestroy() {
	if s.b.cfg.weak == WeakReusedScratch {
		os.Rename(s.scratch(), s.b.reusedScratch())
	}
}
