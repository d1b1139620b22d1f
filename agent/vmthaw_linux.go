package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bootIDPath is the kernel's per-boot id, which a clone would otherwise
// share with every clone of its golden snapshot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

var (
	machineIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)
	bootIDRE    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// thaw makes a restored clone its own (Thaw): RNG first, so nothing after
// it draws from the golden's state.
func thaw(t *Thaw) error {
	switch {
	case len(t.Entropy) < MinThawEntropy:
		return fmt.Errorf("thaw: %d bytes of entropy, want at least %d", len(t.Entropy), MinThawEntropy)
	case !machineIDRE.MatchString(t.MachineID):
		return fmt.Errorf("thaw: machine-id %q is not 32 hex digits", t.MachineID)
	case !bootIDRE.MatchString(t.BootID):
		return fmt.Errorf("thaw: boot_id %q is not a UUID", t.BootID)
	}
	if err := reseedRNG(t.Entropy); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(t.Clock.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("thaw: set the clock: %w", err)
	}
	// A resumed session's VM already holds its identity, which is the
	// session's: it is left as it is, not rewritten and bound over again
	// (each resume would stack another mount on boot_id).
	if !holds("/etc/machine-id", t.MachineID) {
		if err := replaceEtc("machine-id", []byte(t.MachineID+"\n"), 0o444); err != nil {
			return fmt.Errorf("thaw: %w", err)
		}
	}
	if !holds(bootIDPath, t.BootID) {
		if err := bindBootID(t.BootID); err != nil {
			return err
		}
	}
	if t.Net != "" {
		return readdress(t)
	}
	return nil
}

// holds reports whether the file at path reads id and a newline.
func holds(path, id string) bool {
	b, err := os.ReadFile(path)
	return err == nil && string(b) == id+"\n"
}

// stepClock moves the wall clock by d.
func stepClock(d time.Duration) error {
	ts := unix.NsecToTimespec(time.Now().Add(d).UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("step the clock: %w", err)
	}
	return nil
}

// reseedRNG credits e to the kernel's input pool (RNDADDENTROPY) and makes
// the CRNG reseed from it now (RNDRESEEDCRNG), so /dev/urandom and
// getrandom diverge from every other clone's at once.
func reseedRNG(e []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(e))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(e)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(e)))
	copy(info[8:], e)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("thaw: RNDADDENTROPY: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("thaw: RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

// bindBootID covers the kernel's boot_id with a read-only file holding id:
// the workload reads the clone's, not the golden boot's. A job that is
// root in the guest can unmount it and read the golden's boot_id, which
// every clone shares and no tenant ever wrote.
func bindBootID(id string) error {
	const dir = "/run/wovyr"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := dir + "/boot_id"
	if err := os.WriteFile(p, []byte(id+"\n"), 0o444); err != nil {
		return fmt.Errorf("thaw: boot_id: %w", err)
	}
	if err := unix.Mount(p, bootIDPath, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("thaw: bind boot_id: %w", err)
	}
	if err := unix.Mount("", bootIDPath, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("thaw: bind boot_id read-only: %w", err)
	}
	return nil
}

// readdress moves the NIC from the golden's network to the clone's slot:
// its MAC, address, default route and resolver.
func readdress(t *Thaw) error {
	n, err := ParseVMNet(t.Net)
	if err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	old, err := ParseVMNet(t.Golden)
	if err != nil {
		return fmt.Errorf("thaw: golden network: %w", err)
	}
	mac, err := net.ParseMAC(t.MAC)
	if err != nil || len(mac) != 6 {
		return fmt.Errorf("thaw: MAC %q: %v", t.MAC, err)
	}
	nic, err := waitNIC(time.Second)
	if err != nil {
		return err
	}
	nl, err := openRTNL()
	if err != nil {
		return err
	}
	defer nl.close()
	if err := nl.setMAC(nic.Index, mac); err != nil {
		return fmt.Errorf("thaw: %s address %s: %w", nic.Name, mac, err)
	}
	if err := nl.delAddr(nic.Index, old); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("thaw: remove %s: %w", old.Addr, err)
	}
	if err := nl.addAddr(nic.Index, n); err != nil {
		return fmt.Errorf("thaw: %s address %s: %w", nic.Name, n.Addr, err)
	}
	if err := nl.replaceDefaultRoute(nic.Index, n); err != nil {
		return fmt.Errorf("thaw: default route via %s: %w", n.Gateway, err)
	}
	if err := replaceEtc("resolv.conf", n.ResolvConf(), 0o644); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	return nil
}
