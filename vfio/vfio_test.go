package vfio_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/vfio"
	"github.com/wovyr/wovyr/vfio/vfiotest"
)

// TestBindAndRelease: binding a GPU moves every endpoint of its IOMMU
// group (its audio function too, not the bridge) to vfio-pci through
// driver_override, unbind and bind, in address order, and gives the group
// node to the VMM user; Release undoes it in reverse, the host drivers get
// their devices back, and a second Release does nothing.
func TestBindAndRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chown of the group node needs root (CI runs as root)")
	}
	k := vfiotest.New(t, vfiotest.Drivers, vfiotest.GPUGroup...)
	b, err := k.Host.Bind(context.Background(), "0000:01:00.0", 4321, 4322)
	if err != nil {
		t.Fatal(err)
	}
	if b.Group != "7" || b.BDF != "0000:01:00.0" {
		t.Fatalf("binding %+v", b)
	}
	want := "[nvidia unbind 0000:01:00.0 vfio-pci bind 0000:01:00.0 snd_hda_intel unbind 0000:01:00.1 vfio-pci bind 0000:01:00.1]"
	if got := fmt.Sprint(k.TakeLog()); got != want {
		t.Fatalf("bind wrote %s\nwant %s", got, want)
	}
	all := []string{"0000:00:01.0", "0000:01:00.0", "0000:01:00.1"}
	if got, want := k.State("7", all...), "0000:00:01.0=pcieport((null)) 0000:01:00.0=vfio-pci(vfio-pci) 0000:01:00.1=vfio-pci(vfio-pci) node=4321:4322"; got != want {
		t.Fatalf("bound: %s\nwant %s", got, want)
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = "[vfio-pci unbind 0000:01:00.1 snd_hda_intel bind 0000:01:00.1 vfio-pci unbind 0000:01:00.0 nvidia bind 0000:01:00.0]"
	if got := fmt.Sprint(k.TakeLog()); got != want {
		t.Fatalf("release wrote %s\nwant %s", got, want)
	}
	if got, want := k.State("7", all...), "0000:00:01.0=pcieport((null)) 0000:01:00.0=nvidia() 0000:01:00.1=snd_hda_intel() node=0:0"; got != want {
		t.Fatalf("released: %s\nwant %s", got, want)
	}
	if err := b.Release(context.Background()); err != nil || len(k.TakeLog()) != 0 {
		t.Fatalf("second release: %v", err)
	}
}

// TestBindRefusals: where VFIO cannot isolate, Bind refuses with a typed
// error that says why and writes nothing.
func TestBindRefusals(t *testing.T) {
	devs := append(slices.Clone(vfiotest.GPUGroup), vfiotest.Dev{BDF: "0000:02:00.0", Driver: "nvidia", Class: "0x030000"})
	for _, c := range []struct {
		name, bdf string
		breakIt   func(t *testing.T, k *vfiotest.Kernel)
		is        error
		want      string
	}{
		{"no /dev/vfio", "0000:01:00.0", func(t *testing.T, k *vfiotest.Kernel) { os.Remove(filepath.Join(k.Host.Dev, "vfio", "vfio")) }, vfio.ErrNoVFIO,
			"VFIO unavailable: no /dev/vfio/vfio on this node"},
		{"no vfio-pci", "0000:01:00.0", func(t *testing.T, k *vfiotest.Kernel) {
			gone := filepath.Join(k.Host.Sys, "vfio-pci-gone")
			os.Rename(filepath.Join(k.Host.Sys, "bus", "pci", "drivers", vfio.Driver), gone)
			t.Cleanup(func() { os.Rename(gone, filepath.Join(k.Host.Sys, "bus", "pci", "drivers", vfio.Driver)) }) // before stop: its FIFOs back
		}, vfio.ErrNoVFIO,
			"VFIO unavailable: the vfio-pci driver is not loaded"},
		{"no IOMMU group", "0000:02:00.0", nil, vfio.ErrNoIOMMUGroup,
			"no IOMMU group for 0000:02:00.0: is the IOMMU on (intel_iommu=on or amd_iommu=on)?"},
		{"unknown device", "0000:03:00.0", nil, vfio.ErrNoDevice, "no such PCI device: 0000:03:00.0"},
		{"bad address", "../../../etc", nil, vfio.ErrBadAddress, `invalid PCI address: "../../../etc" (want like 0000:01:00.0)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := vfiotest.New(t, vfiotest.Drivers, devs...)
			if c.breakIt != nil {
				c.breakIt(t, k)
			}
			before := k.State("7", "0000:01:00.0", "0000:01:00.1", "0000:02:00.0")
			_, err := k.Host.Bind(context.Background(), c.bdf, 4321, 4321)
			if !errors.Is(err, c.is) || err.Error() != c.want {
				t.Fatalf("Bind: %v\nwant %s", err, c.want)
			}
			if l := k.TakeLog(); len(l) != 0 {
				t.Fatalf("a refused bind wrote %v", l)
			}
			if after := k.State("7", "0000:01:00.0", "0000:01:00.1", "0000:02:00.0"); after != before {
				t.Fatalf("a refused bind changed %s to %s", before, after)
			}
		})
	}
}

// TestBindRollsBack: when one function of the group will not leave its
// host driver, Bind fails naming it and gives back what it had bound.
func TestBindRollsBack(t *testing.T) {
	k := vfiotest.New(t, vfiotest.Drivers, vfiotest.GPUGroup...)
	k.Stuck["snd_hda_intel"] = true
	_, err := k.Host.Bind(context.Background(), "0000:01:00.0", 4321, 4321)
	if want := "0000:01:00.1 is bound to snd_hda_intel, want no driver"; err == nil || err.Error() != want {
		t.Fatalf("Bind with a stuck function: %v\nwant %s", err, want)
	}
	if got, want := k.State("7", "0000:01:00.0", "0000:01:00.1"), "0000:01:00.0=nvidia() 0000:01:00.1=snd_hda_intel()"; !strings.HasPrefix(got, want) {
		t.Fatalf("after the failed bind: %s\nwant %s", got, want)
	}
}
