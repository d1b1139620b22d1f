// Package vfiotest is a fake sysfs tree for package vfio's callers' tests:
// real files and links in a temp dir, whose drivers' bind and unbind files
// are FIFOs served by goroutines acting as the kernel.
package vfiotest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/vfio"
)

// Kernel is a fake sysfs tree in a temp dir whose drivers' bind and unbind
// files are FIFOs served by goroutines that do what the kernel does: move
// the device's driver link (honouring driver_override), and create the
// group's /dev/vfio node when vfio-pci binds.
type Kernel struct {
	// Host is the tree, for vfio.Host's methods.
	Host vfio.Host
	t    *testing.T
	mu   sync.Mutex
	log  []string
	// Stuck drivers ignore unbind (a device the host will not let go).
	// Set it before the first Bind.
	Stuck map[string]bool
	fifos []string
	wg    sync.WaitGroup
}

// Dev is one PCI function: its address, driver ("" for none), class
// (0x060400 is a bridge) and IOMMU group ("" for none).
type Dev struct {
	BDF, Driver, Class, Group string
}

// New builds the tree under t.TempDir with the drivers (vfio-pci always)
// and devices, and stops its goroutines when t ends.
func New(t *testing.T, drivers []string, devs ...Dev) *Kernel {
	t.Helper()
	root := t.TempDir()
	k := &Kernel{t: t, Host: vfio.Host{Sys: filepath.Join(root, "sys"), Dev: filepath.Join(root, "dev")}, Stuck: map[string]bool{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(k.dev("vfio"), 0o755))
	must(os.WriteFile(k.dev("vfio", "vfio"), nil, 0o666))
	for _, d := range append(drivers, vfio.Driver) {
		dir := k.sys("bus", "pci", "drivers", d)
		must(os.MkdirAll(dir, 0o755))
		for _, op := range []string{"bind", "unbind"} {
			p := filepath.Join(dir, op)
			must(syscall.Mkfifo(p, 0o600))
			k.fifos = append(k.fifos, p)
			k.wg.Add(1)
			go k.serve(d, op, p)
		}
	}
	for _, d := range devs {
		dir := k.sys("bus", "pci", "devices", d.BDF)
		must(os.MkdirAll(dir, 0o755))
		must(os.WriteFile(filepath.Join(dir, "class"), []byte(d.Class+"\n"), 0o444))
		must(os.WriteFile(filepath.Join(dir, "driver_override"), []byte("(null)\n"), 0o644))
		if d.Driver != "" {
			must(os.Symlink(k.sys("bus", "pci", "drivers", d.Driver), filepath.Join(dir, "driver")))
		}
		if d.Group != "" {
			g := k.sys("kernel", "iommu_groups", d.Group, "devices")
			must(os.MkdirAll(g, 0o755))
			must(os.Symlink(dir, filepath.Join(g, d.BDF)))
			must(os.Symlink(k.sys("kernel", "iommu_groups", d.Group), filepath.Join(dir, "iommu_group")))
		}
	}
	t.Cleanup(k.stop)
	return k
}

func (k *Kernel) serve(driver, op, fifo string) {
	defer k.wg.Done()
	for {
		f, err := os.Open(fifo) // blocks until a writer opens it
		if err != nil {
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		v := strings.TrimSpace(string(b))
		if v == "stop" {
			return
		}
		k.mu.Lock()
		k.log = append(k.log, driver+" "+op+" "+v)
		k.apply(driver, op, v)
		k.mu.Unlock()
	}
}

func (k *Kernel) apply(driver, op, bdf string) {
	link := k.sys("bus", "pci", "devices", bdf, "driver")
	switch op {
	case "unbind":
		if k.Stuck[driver] {
			return
		}
		if cur, err := os.Readlink(link); err == nil && filepath.Base(cur) == driver {
			os.Remove(link)
		}
	case "bind":
		ov, _ := os.ReadFile(k.sys("bus", "pci", "devices", bdf, "driver_override"))
		if o := strings.TrimSpace(string(ov)); o != "" && o != "(null)" && o != driver {
			return // the kernel refuses: the override names another driver
		}
		if _, err := os.Readlink(link); err == nil {
			return // already bound
		}
		os.Symlink(k.sys("bus", "pci", "drivers", driver), link)
		if driver == vfio.Driver {
			g, _ := os.Readlink(k.sys("bus", "pci", "devices", bdf, "iommu_group"))
			if n := k.dev("vfio", filepath.Base(g)); !exists(n) {
				os.WriteFile(n, nil, 0o600)
			}
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// stop tells each fifo's reader to end. A blocking open for writing would
// wait forever for a reader that has gone, so the open does not block; a
// reader between two reads gets a second's worth of retries.
func (k *Kernel) stop() {
	for _, p := range k.fifos {
		for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
			f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err == nil {
				f.Write([]byte("stop"))
				f.Close()
				break
			}
			if time.Now().After(deadline) {
				break
			}
		}
	}
	k.wg.Wait()
}

// TakeLog returns what was written to the drivers' bind and unbind
// files since the last call, as "driver op address", in order.
func (k *Kernel) TakeLog() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.log
	k.log = nil
	return l
}

// State is each device's driver and override, and the group node's owner.
func (k *Kernel) State(group string, bdfs ...string) string {
	var s []string
	for _, b := range bdfs {
		ov, _ := os.ReadFile(k.sys("bus", "pci", "devices", b, "driver_override"))
		drv := k.driverOf(b)
		if drv == "" {
			drv = "-"
		}
		s = append(s, fmt.Sprintf("%s=%s(%s)", b, drv, strings.TrimSpace(string(ov))))
	}
	if st, err := os.Stat(k.dev("vfio", group)); err == nil {
		sys := st.Sys().(*syscall.Stat_t)
		uid, gid := sys.Uid, sys.Gid
		s = append(s, fmt.Sprintf("node=%d:%d", uid, gid))
	}
	return strings.Join(s, " ")
}

func (k *Kernel) sys(p ...string) string { return filepath.Join(append([]string{k.Host.Sys}, p...)...) }
func (k *Kernel) dev(p ...string) string { return filepath.Join(append([]string{k.Host.Dev}, p...)...) }

func (k *Kernel) driverOf(bdf string) string {
	link, err := os.Readlink(k.sys("bus", "pci", "devices", bdf, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(link)
}

// GPUGroup is a GPU's usual IOMMU group 7: its root port (a bridge), the
// GPU on nvidia and its audio function on snd_hda_intel.
var GPUGroup = []Dev{
	{"0000:00:01.0", "pcieport", "0x060400", "7"},
	{"0000:01:00.0", "nvidia", "0x030000", "7"},
	{"0000:01:00.1", "snd_hda_intel", "0x040300", "7"},
}

// Drivers are GPUGroup's host drivers.
var Drivers = []string{"nvidia", "snd_hda_intel", "pcieport"}
