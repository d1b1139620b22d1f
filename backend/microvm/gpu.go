package microvm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vfio"
	"github.com/wovyr/wovyr/vmm"
)

// GPUSupport implements sandbox.GPUProvider: whole GPUs passed through
// with VFIO, on a KVM node only (a TCG guest has no IOMMU-backed DMA to
// give a device), where the node has VFIO and the daemon may lock a
// guest's RAM (VFIO pins it all).
func (b *Backend) GPUSupport(ctx context.Context) error {
	c := b.Probe(ctx)
	if !c.Available {
		return errors.New("microvm unavailable")
	}
	return vfioSupport(vmm.Accel(c.Accel), b.cfg.VFIO, b.hardMemlock(), vmm.MemlockFor(b.guestRAM(sandbox.Limits{}.WithDefaults().Memory)))
}

// vfioSupport is GPUSupport's judgement: KVM, then VFIO on the node, then
// a hard RLIMIT_MEMLOCK (memlock) of at least need.
func vfioSupport(accel vmm.Accel, host vfio.Host, memlock, need uint64) error {
	if accel != vmm.KVM {
		return fmt.Errorf("VFIO passthrough needs KVM (accel %s here)", accel)
	}
	if err := host.Check(); err != nil {
		return err
	}
	if memlock < need {
		return fmt.Errorf("VFIO pins the guest's RAM: the daemon's hard RLIMIT_MEMLOCK is %d MiB, a VM needs %d MiB (raise it, e.g. LimitMEMLOCK=infinity)", memlock>>20, need>>20)
	}
	return nil
}

// hardMemlock is this process's hard RLIMIT_MEMLOCK, which the VMM (an
// unprivileged user behind prlimit) cannot exceed.
func (b *Backend) hardMemlock() uint64 {
	if b.cfg.memlock != 0 {
		return b.cfg.memlock
	}
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r) != nil {
		return 0
	}
	return r.Max
}

// passThrough binds the invocation's devices for spec's VM (run as
// spec.UID) and names them in spec.VFIO. They must be the template's:
// a sandbox serves only the devices it was prepared for. The release func
// gives them back to the host driver; call it only once the VM is gone.
func (s *vmSandbox) passThrough(ctx context.Context, gpus []sandbox.GPUDevice, spec *vmm.Spec) (release func() error, err error) {
	if !slices.EqualFunc(gpus, s.tmpl.GPUs, func(x, y sandbox.GPUDevice) bool { return x.UUID == y.UUID }) {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "microvm sandbox %s holds other GPU devices than the invocation was assigned", s.id)
	}
	if len(gpus) == 0 {
		return func() error { return nil }, nil
	}
	if err := vfioSupport(spec.Accel, s.b.cfg.VFIO, s.b.hardMemlock(), vmm.MemlockFor(spec.Memory)); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "microvm: GPU passthrough")
	}
	var bound []*vfio.Binding
	release = func() error {
		var errs []error
		for i := len(bound) - 1; i >= 0; i-- { // one group may hold two of them: last bound, first given back
			errs = append(errs, bound[i].Release(context.WithoutCancel(ctx)))
		}
		bound = nil
		return errors.Join(errs...)
	}
	for _, g := range gpus {
		if g.PCI == "" {
			err = fmt.Errorf("VFIO passes whole GPUs only: %s is a MIG instance", g.UUID)
		} else {
			var b *vfio.Binding
			if b, err = s.b.cfg.VFIO.Bind(ctx, g.PCI, int(spec.UID), int(spec.GID)); err == nil {
				bound = append(bound, b)
				spec.VFIO = append(spec.VFIO, g.PCI)
			}
		}
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, errors.Join(err, release()), "microvm: GPU passthrough of %s", g.UUID)
		}
	}
	return release, nil
}

// giveBack kills m (if it started) and, once it is verifiably gone, gives
// its devices back. A VM that may still hold them keeps them bound to
// vfio-pci: the host cannot see such a device, so its scrub quarantines
// it rather than hand it on.
func (s *vmSandbox) giveBack(release func() error, m vmm.Machine) {
	if m != nil {
		if err := m.Kill(); err != nil {
			s.b.cfg.Logger.Error("microvm: VM not verified gone; its GPUs stay bound to vfio-pci", "vm", s.id, "err", err)
			return
		}
	}
	if err := release(); err != nil {
		s.b.cfg.Logger.Error("microvm: GPUs not given back to the host driver", "vm", s.id, "err", err)
	}
}
