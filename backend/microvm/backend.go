package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// Backend is the microvm backend.
type Backend struct {
	cfg Config

	mu    sync.Mutex
	probe *probed // the first successful probe; the accelerator never changes under a running wovyr

	bat   batteryCache // what battery probes share per backend (Suite)
	disks *disks       // templates' root disks

	goldMu  sync.Mutex         // serialises golden lookups and captures
	goldens map[string]*golden // by key ID: the goldens this process holds
}

type probed struct {
	cap   sandbox.Capability
	accel vmm.Accel
	image *vmimage.Image
	uid   uint32
	gid   uint32
}

// New returns the backend. It starts nothing: Probe does the checking.
func New(cfg Config) (*Backend, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Backend{cfg: c, disks: newDisks(disksDir(c.StateDir), c.TemplatesDir, c.Logger)}, nil
}

// Name implements sandbox.Backend.
func (b *Backend) Name() string { return "microvm" }

// Strength implements sandbox.Backend.
func (b *Backend) Strength() sandbox.Strength { return sandbox.MicroVM }

// Kinds implements sandbox.Backend: commands, and sessions in warm VMs
// (session.go).
func (b *Backend) Kinds() []sandbox.WorkloadKind {
	return []sandbox.WorkloadKind{sandbox.KindCommand, sandbox.KindSession}
}

// baseCmdline is the guest kernel command line. The tsc options stop one
// boot in five from hanging under TCG (DESIGN §5). mitigations=off drops
// the guest kernel's own Spectre-class defences (retpolines, RSB filling,
// …), which are costly to emulate and guard only boundaries inside the
// guest, whose every process is the one tenant's (its code runs as guest
// root). What guards the host is QEMU's confinement, and on KVM the host
// kernel's mitigations, which this does not touch. cryptomgr.notests skips
// the crypto API's self-tests of every algorithm the kernel registers, the
// flag's purpose (short-lived VMs): under TCG they cost 0.3 s of each boot,
// about a fifth of it, for a guest whose only kernel crypto is ext4's
// crc32c (fips=1 would run them regardless).
const baseCmdline = "console=ttyS0 panic=-1 tsc_early_khz=2600000 tsc=reliable quiet mitigations=off cryptomgr.notests"

func (b *Backend) cmdline(mode string) string {
	s := baseCmdline + " " + agent.CmdlineMode + "=" + mode
	if b.cfg.ExtraCmdline != "" {
		s += " " + b.cfg.ExtraCmdline
	}
	return s
}

// Probe implements sandbox.Backend. The first successful probe boots real
// guests — KVM with a timeout, then TCG — and is remembered; later calls
// return it.
func (b *Backend) Probe(ctx context.Context) sandbox.Capability {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probe != nil {
		return b.probe.cap
	}
	p, err := b.doProbe(ctx)
	if err != nil {
		b.cfg.Logger.Warn("microvm probe failed", "err", err)
		return sandbox.Capability{Available: false, Reason: err.Error(), Egress: false}
	}
	b.probe = p
	b.cfg.Logger.Info("microvm probe", "accel", p.accel, "version", p.cap.Version)
	if err := b.reconcileSnapshots(p); err != nil {
		b.cfg.Logger.Warn("microvm: golden snapshots", "err", err)
	}
	return p.cap
}

func (b *Backend) doProbe(ctx context.Context) (*probed, error) {
	version, err := b.cfg.VMM.Version(ctx)
	if err != nil {
		return nil, err
	}
	im, err := vmimage.Load(b.cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	if err := b.checkGuest(im); err != nil {
		return nil, err
	}
	p := &probed{image: im}
	if b.cfg.SharedUser {
		if p.uid, p.gid, err = ensureUser(ctx, b.cfg.User); err != nil {
			return nil, err
		}
	}
	var why []string
	for _, a := range b.accelCandidates() {
		timeout := b.cfg.bootTimeout(a)
		if a == vmm.KVM {
			timeout = b.cfg.KVMProbeTimeout
		}
		if err := b.markerBoot(ctx, p, a, timeout); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		p.accel = a
		break
	}
	if p.accel == "" {
		return nil, fmt.Errorf("no accelerator boots a guest: %s", strings.Join(why, "; "))
	}
	features := []string{"accel=" + string(p.accel), "oneshot-block", "warm-virtio-serial", "kernel=" + im.KernelRelease}
	if b.cfg.Network != nil {
		features = append(features, "egress-tap")
	}
	p.cap = sandbox.Capability{
		Available:  true,
		Version:    version + "; guest " + im.KernelRelease,
		ConfigHash: b.configHash(version, p),
		Accel:      string(p.accel),
		Egress:     b.cfg.Network != nil,
		Features:   features,
	}
	if len(why) > 0 {
		p.cap.Features = append(p.cap.Features, "kvm-unusable")
		b.cfg.Logger.Info("microvm: falling back", "accel", p.accel, "because", strings.Join(why, "; "))
	}
	return p, nil
}

// checkGuest refuses an image whose guest is not this node's (Config.Guest).
func (b *Backend) checkGuest(im *vmimage.Image) error {
	if b.cfg.Guest == "" {
		return nil
	}
	d, err := vmimage.FileDigest(b.cfg.Guest)
	if err != nil {
		return fmt.Errorf("microvm: this node's wovyr-guest: %w", err)
	}
	if im.GuestDigest != d {
		return fmt.Errorf("microvm: the image in %s carries another wovyr-guest than this node's %s (an image built by another wovyr, or before guests were recorded): rebuild it with `wovyr image build microvm`", im.Dir, b.cfg.Guest)
	}
	return nil
}

func (b *Backend) accelCandidates() []vmm.Accel {
	if b.cfg.Accel != "" {
		return []vmm.Accel{b.cfg.Accel}
	}
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		return []vmm.Accel{vmm.KVM, vmm.TCG}
	}
	return []vmm.Accel{vmm.TCG}
}

// markerBoot boots the image in marker mode, hardened as for real work, and
// waits for the marker on the console.
func (b *Backend) markerBoot(ctx context.Context, p *probed, a vmm.Accel, timeout time.Duration) error {
	spec := b.spec(p, a, "probe-"+randomID(), agent.ModeMarker, 128<<20)
	// The per-VM entry lets Reconcile find this VM should wovyr crash now.
	entry := filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-"+spec.ID)
	if err := os.MkdirAll(entry, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(entry)
	uid, gid, release, err := b.vmUser(p)
	if err != nil {
		return err
	}
	defer release()
	spec.UID, spec.GID = uid, gid
	m, err := b.cfg.VMM.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer m.Kill()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := m.Wait(wctx); err != nil {
		return fmt.Errorf("no marker within %s: %w", timeout, err)
	}
	if !strings.Contains(string(m.Console()), agent.ReadyMarker) {
		return fmt.Errorf("guest exited without its marker: %s", tail(m.Console(), 512))
	}
	return nil
}

// spec is the hardened VM spec shared by every boot; the caller sets the
// VM's credentials (vmUser).
func (b *Backend) spec(p *probed, a vmm.Accel, id, mode string, guestMem int64) *vmm.Spec {
	s := b.baseSpec(p, a, id, mode, guestMem)
	b.weakSpec(s)
	return s
}

// vmmCPU is the CPU quota, in cores, for QEMU's own threads beside the
// vCPU threads: its main loop (timers, console, virtio requests) and RCU
// thread. A quota of exactly VCPUs throttled one-shot VMs in 16–26 of their
// ~35 periods, 70–210 ms lost per VM; a quarter core left none throttled.
// The guest cannot use it: each vCPU is one thread, at most one core.
const vmmCPU = 0.25

func (b *Backend) baseSpec(p *probed, a vmm.Accel, id, mode string, guestMem int64) *vmm.Spec {
	return &vmm.Spec{
		ID: id, Kernel: p.image.Vmlinux(), Initrd: p.image.Initramfs(),
		Cmdline: b.cmdline(mode), Accel: a, CPUs: b.cfg.VCPUs, Memory: guestMem,
		ConsoleBytes: 64 << 10, UID: p.uid, GID: p.gid,
		Limits: vmm.Limits{
			// Guest RAM, TCG's 64 MiB translation cache, QEMU itself.
			Memory: guestMem + 64<<20 + 192<<20,
			Pids:   128,
			CPUs:   float64(b.cfg.VCPUs) + vmmCPU,
		},
	}
}

func (b *Backend) configHash(version string, p *probed) string {
	h := sha256.New()
	spec := b.spec(p, p.accel, "hash", "hash", 0)
	spec.UID, spec.GID = b.cfg.UIDBase, b.cfg.UIDBase
	fmt.Fprintln(h, version, p.image.Digest, p.accel, b.cfg.weak, b.cfg.SharedUser, p.uid, b.cfg.UIDBase, b.cfg.UIDCount, vmm.SandboxOpts, spec.Limits.Pids, b.cfg.Network != nil)
	if q, ok := b.cfg.VMM.(*vmm.QEMU); ok {
		fmt.Fprintln(h, strings.Join(q.Args(spec), " "))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// probed returns the probe result, probing if needed.
func (b *Backend) probed(ctx context.Context) (*probed, error) {
	if c := b.Probe(ctx); !c.Available {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm backend unavailable: %s", c.Reason)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.probe, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Sandbox = (*vmSandbox)(nil)
)
