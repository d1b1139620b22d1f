package microvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vfio"
	"github.com/wovyr/wovyr/vfio/vfiotest"
	"github.com/wovyr/wovyr/vmm"
)

// TestVFIOSupport: a microVM gives GPUs only under KVM, on a node with
// VFIO, where the daemon may lock a guest's RAM; each refusal says which.
func TestVFIOSupport(t *testing.T) {
	k := vfiotest.New(t, vfiotest.Drivers, vfiotest.GPUGroup...)
	none := vfio.Host{Sys: t.TempDir(), Dev: t.TempDir()}
	for _, c := range []struct {
		accel         vmm.Accel
		host          vfio.Host
		memlock, need uint64
		want          string
	}{
		{vmm.TCG, k.Host, 1 << 40, 1 << 20, "VFIO passthrough needs KVM (accel tcg here)"},
		{vmm.KVM, none, 1 << 40, 1 << 20, "VFIO unavailable: no /dev/vfio/vfio on this node"},
		{vmm.KVM, k.Host, 8 << 20, 448 << 20, "VFIO pins the guest's RAM: the daemon's hard RLIMIT_MEMLOCK is 8 MiB, a VM needs 448 MiB (raise it, e.g. LimitMEMLOCK=infinity)"},
		{vmm.KVM, k.Host, 448 << 20, 448 << 20, ""},
	} {
		err := vfioSupport(c.accel, c.host, c.memlock, c.need)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("%s: %v, want %q", c.accel, err, c.want)
		}
	}
}

// TestPassThrough: a GPU microVM's spec names exactly its devices as
// vfio-pci functions, each device's IOMMU group bound to vfio-pci and its
// node given to the VM's user while the VM runs; giving them back returns
// every function to its host driver. A MIG instance, devices other than
// the template's, or a TCG VM are refused and leave nothing bound.
func TestPassThrough(t *testing.T) {
	second := vfiotest.Dev{BDF: "0000:02:00.0", Driver: "nvidia", Class: "0x030000", Group: "9"}
	k := vfiotest.New(t, vfiotest.Drivers, append(slices.Clone(vfiotest.GPUGroup), second)...)
	gpus := []sandbox.GPUDevice{{UUID: "GPU-a", PCI: "0000:01:00.0"}, {UUID: "GPU-b", PCI: "0000:02:00.0"}}
	b := &Backend{cfg: Config{VFIO: k.Host, Logger: slog.New(slog.DiscardHandler), memlock: 1 << 30}}
	s := &vmSandbox{b: b, id: "t1", tmpl: sandbox.Template{GPUs: gpus}}
	spec := &vmm.Spec{ID: "vm-t1", Accel: vmm.KVM, UID: 4321, GID: 4322, Memory: 256 << 20}
	release, err := s.passThrough(context.Background(), gpus, spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0000:01:00.0", "0000:02:00.0"}; !slices.Equal(spec.VFIO, want) {
		t.Fatalf("spec.VFIO %v, want %v", spec.VFIO, want)
	}
	all := []string{"0000:01:00.0", "0000:01:00.1", "0000:02:00.0"}
	if got, want := k.State("7", all...)+" "+k.State("9"), "0000:01:00.0=vfio-pci(vfio-pci) 0000:01:00.1=vfio-pci(vfio-pci) 0000:02:00.0=vfio-pci(vfio-pci) node=4321:4322 node=4321:4322"; got != want {
		t.Fatalf("while the VM runs: %s\nwant %s", got, want)
	}
	s.giveBack(release, nil)
	if got, want := k.State("7", all...)+" "+k.State("9"), "0000:01:00.0=nvidia() 0000:01:00.1=snd_hda_intel() 0000:02:00.0=nvidia() node=0:0 node=0:0"; got != want {
		t.Fatalf("given back: %s\nwant %s", got, want)
	}
	k.TakeLog()

	mig := []sandbox.GPUDevice{gpus[0], {UUID: "MIG-x"}}
	for _, c := range []struct {
		name  string
		tmpl  []sandbox.GPUDevice
		inv   []sandbox.GPUDevice
		accel vmm.Accel
		want  string
	}{
		{"MIG", mig, mig, vmm.KVM, "backend-failure: microvm: GPU passthrough of MIG-x: VFIO passes whole GPUs only: MIG-x is a MIG instance"},
		{"other devices", gpus[:1], gpus[1:], vmm.KVM, "backend-failure: microvm sandbox t1 holds other GPU devices than the invocation was assigned"},
		{"TCG", gpus, gpus, vmm.TCG, "backend-failure: microvm: GPU passthrough: VFIO passthrough needs KVM (accel tcg here)"},
	} {
		s := &vmSandbox{b: b, id: "t1", tmpl: sandbox.Template{GPUs: c.tmpl}}
		spec := &vmm.Spec{ID: "vm-t1", Accel: c.accel, UID: 4321, GID: 4322, Memory: 256 << 20}
		_, err := s.passThrough(context.Background(), c.inv, spec)
		if err == nil || err.Error() != c.want || !errors.Is(err, sandbox.BackendFailure) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
		if got, want := k.State("7", all...), "0000:01:00.0=nvidia() 0000:01:00.1=snd_hda_intel() 0000:02:00.0=nvidia() node=0:0"; got != want {
			t.Errorf("%s: left %s", c.name, got)
		}
	}
}

// TestGPUSupportHere: this node's microVM says why it gives no GPUs (on a
// TCG node, KVM) and a GPU template is refused at Prepare with that
// reason, before any device is touched.
func TestGPUSupportHere(t *testing.T) {
	b := backend(t)
	c := b.Probe(context.Background())
	if c.Accel == string(vmm.KVM) {
		t.Skip("this node runs KVM guests: the answer depends on its VFIO")
	}
	want := "VFIO passthrough needs KVM (accel " + c.Accel + " here)"
	if err := b.GPUSupport(context.Background()); err == nil || err.Error() != want {
		t.Fatalf("GPUSupport: %v, want %s", err, want)
	}
	_, err := b.Prepare(context.Background(), sandbox.Template{Kind: sandbox.KindCommand, GPUs: []sandbox.GPUDevice{{UUID: "GPU-a", PCI: "0000:01:00.0"}}})
	if want = "backend-failure: microvm: GPU template: " + want; err == nil || err.Error() != want {
		t.Fatalf("Prepare of a GPU template: %v, want %s", err, want)
	}
}
