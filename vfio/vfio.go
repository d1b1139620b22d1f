// Package vfio hands whole PCI devices (GPUs) to a VM through VFIO: it
// binds a device, and every other endpoint of its IOMMU group, to the
// vfio-pci driver through sysfs (driver_override, unbind, bind), gives the
// group's /dev/vfio node to the VMM's unprivileged user, and undoes all of
// it on Release, so the host driver gets the device back.
//
// # Why the whole group
//
// The IOMMU isolates groups, not functions: VFIO opens a group only when
// every endpoint in it is bound to vfio-pci (or to no driver), and a VM
// that holds one function could reach the others by DMA. A GPU's group
// usually holds its own audio function too; PCI bridges are left alone
// (the kernel allows them in a viable group).
//
// # What it refuses
//
// It refuses, changing nothing, where VFIO cannot isolate: no
// /dev/vfio/vfio or no vfio-pci driver (ErrNoVFIO), a device without an
// IOMMU group (ErrNoIOMMUGroup: the IOMMU is off), an unknown or malformed
// address (ErrNoDevice, ErrBadAddress). It never loads modules nor changes
// kernel parameters.
//
// Host is rooted (Sys, Dev) so the logic runs against a fake sysfs tree in
// tests; the zero Host is this node's /sys and /dev.
package vfio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Sentinels, matched with errors.Is.
var (
	ErrNoVFIO       = errors.New("VFIO unavailable")
	ErrNoIOMMUGroup = errors.New("no IOMMU group")
	ErrNoDevice     = errors.New("no such PCI device")
	ErrBadAddress   = errors.New("invalid PCI address")
)

// Driver is the kernel driver VFIO passthrough binds devices to.
const Driver = "vfio-pci"

// bindWait bounds the wait for a device's driver link to show a bind or
// unbind (the kernel does it within the write; a fake tree a little later).
const bindWait = 2 * time.Second

// bdfRE is a PCI address in sysfs form: domain:bus:device.function.
var bdfRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Host is a node's sysfs and /dev. Zero fields mean "/sys" and "/dev".
type Host struct {
	Sys string
	Dev string
}

func (h Host) sys(p ...string) string {
	root := h.Sys
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

func (h Host) dev(p ...string) string {
	root := h.Dev
	if root == "" {
		root = "/dev"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

// Check says why this node cannot pass devices through, or nil.
func (h Host) Check() error {
	if _, err := os.Stat(h.dev("vfio", "vfio")); err != nil {
		return fmt.Errorf("%w: no /dev/vfio/vfio on this node", ErrNoVFIO)
	}
	if _, err := os.Stat(h.sys("bus", "pci", "drivers", Driver)); err != nil {
		return fmt.Errorf("%w: the %s driver is not loaded", ErrNoVFIO, Driver)
	}
	return nil
}

// Group is the IOMMU group of bdf and its members, in address order.
func (h Host) Group(bdf string) (id string, members []string, err error) {
	if !bdfRE.MatchString(bdf) {
		return "", nil, fmt.Errorf("%w: %q (want like 0000:01:00.0)", ErrBadAddress, bdf)
	}
	if _, err := os.Stat(h.sys("bus", "pci", "devices", bdf)); err != nil {
		return "", nil, fmt.Errorf("%w: %s", ErrNoDevice, bdf)
	}
	link, err := os.Readlink(h.sys("bus", "pci", "devices", bdf, "iommu_group"))
	if err != nil {
		return "", nil, fmt.Errorf("%w for %s: is the IOMMU on (intel_iommu=on or amd_iommu=on)?", ErrNoIOMMUGroup, bdf)
	}
	id = filepath.Base(link)
	ents, err := os.ReadDir(h.sys("kernel", "iommu_groups", id, "devices"))
	if err != nil {
		return "", nil, fmt.Errorf("%w %s of %s: %v", ErrNoIOMMUGroup, id, bdf, err)
	}
	for _, e := range ents {
		members = append(members, e.Name())
	}
	slices.Sort(members)
	return id, members, nil
}

// driverOf is the driver bound to bdf, "" for none.
func (h Host) driverOf(bdf string) string {
	link, err := os.Readlink(h.sys("bus", "pci", "devices", bdf, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(link)
}

// bridge reports whether bdf is a PCI bridge (class 0x0604xx).
func (h Host) bridge(bdf string) bool {
	b, err := os.ReadFile(h.sys("bus", "pci", "devices", bdf, "class"))
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "0x0604")
}

func (h Host) write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(value), path, err)
	}
	return nil
}

// waitDriver waits until bdf's driver is want ("" for none).
func (h Host) waitDriver(ctx context.Context, bdf, want string) error {
	deadline := time.Now().Add(bindWait)
	for {
		got := h.driverOf(bdf)
		if got == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if want == "" {
				want = "no driver"
			}
			if got == "" {
				got = "no driver"
			}
			return fmt.Errorf("%s is bound to %s, want %s", bdf, got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// member is one device of a bound group and the driver it had.
type member struct {
	bdf, orig string
}

// Binding is one device's group bound to vfio-pci for one VM.
type Binding struct {
	h        Host
	BDF      string // the device asked for
	Group    string // its IOMMU group
	bound    []member
	node     string // /dev/vfio/<group>
	uid, gid int    // the node's owner before
	owned    bool   // the node's owner was changed
}

// Bind binds bdf's IOMMU group to vfio-pci and makes /dev/vfio/<group>
// the VMM user's (uid, gid). On error nothing stays changed.
func (h Host) Bind(ctx context.Context, bdf string, uid, gid int) (_ *Binding, err error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	id, members, err := h.Group(bdf)
	if err != nil {
		return nil, err
	}
	b := &Binding{h: h, BDF: bdf, Group: id, node: h.dev("vfio", id)}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.Release(context.WithoutCancel(ctx)))
		}
	}()
	for _, m := range members {
		if h.bridge(m) {
			continue
		}
		orig := h.driverOf(m)
		if orig == Driver {
			continue // bound before us (an operator's): left as it is
		}
		b.bound = append(b.bound, member{m, orig})
		if err := h.write(h.sys("bus", "pci", "devices", m, "driver_override"), Driver); err != nil {
			return nil, err
		}
		if orig != "" {
			if err := h.write(h.sys("bus", "pci", "drivers", orig, "unbind"), m); err != nil {
				return nil, err
			}
			if err := h.waitDriver(ctx, m, ""); err != nil {
				return nil, err
			}
		}
		if err := h.write(h.sys("bus", "pci", "drivers", Driver, "bind"), m); err != nil {
			return nil, err
		}
		if err := h.waitDriver(ctx, m, Driver); err != nil {
			return nil, err
		}
	}
	st, err := os.Stat(b.node)
	if err != nil {
		return nil, fmt.Errorf("%w: group %s bound but %s is absent", ErrNoVFIO, id, b.node)
	}
	b.uid, b.gid = ownerOf(st)
	if err := os.Chown(b.node, uid, gid); err != nil {
		return nil, fmt.Errorf("give %s to the VMM user: %w", b.node, err)
	}
	b.owned = true
	return b, nil
}

// Release gives the group back: the node its owner, each device it bound
// its driver (in reverse order). Idempotent; errors are joined, and a
// device whose driver does not come back is named.
func (b *Binding) Release(ctx context.Context) error {
	if b == nil {
		return nil
	}
	var errs []error
	if b.owned {
		if err := os.Chown(b.node, b.uid, b.gid); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		b.owned = false
	}
	h := b.h
	for i := len(b.bound) - 1; i >= 0; i-- {
		m := b.bound[i]
		if h.driverOf(m.bdf) == Driver {
			if err := h.write(h.sys("bus", "pci", "drivers", Driver, "unbind"), m.bdf); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := h.waitDriver(ctx, m.bdf, ""); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		// A newline clears the override (an empty write is refused).
		if err := h.write(h.sys("bus", "pci", "devices", m.bdf, "driver_override"), "\n"); err != nil {
			errs = append(errs, err)
		}
		if m.orig != "" && h.driverOf(m.bdf) != m.orig {
			if err := h.write(h.sys("bus", "pci", "drivers", m.orig, "bind"), m.bdf); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := h.waitDriver(ctx, m.bdf, m.orig); err != nil {
			errs = append(errs, err)
		}
	}
	b.bound = nil
	return errors.Join(errs...)
}

func ownerOf(st os.FileInfo) (uid, gid int) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), int(sys.Gid)
	}
	return 0, 0
}
