package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// VMInit is PID 1 of a wovyr microVM (wovyr-guest init, the initramfs's
// /init). It mounts the pseudo filesystems, loads the virtio and filesystem
// modules listed in /lib/modules/load.order, assembles the workload root
// (the read-only root disk under a writable overlay on the scratch disk),
// chroots into it and then, by the kernel command line's wovyr.mode, runs
// the one-shot block-device protocol or serves the warm control port. It
// powers the VM off when done and returns only if that fails.
func VMInit(ctx context.Context) error {
	for _, m := range []struct{ src, dst, fs string }{
		{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	console := openConsole()
	defer powerOff()
	mode := cmdlineValue(CmdlineMode)
	stage := func(string) {}
	if cmdlineValue(CmdlineDebug) == "1" {
		stage = func(name string) { fmt.Fprintf(console, "wovyr-guest: %s at %v\n", name, uptime()) }
	}
	stage("init")
	if mode == ModeMarker {
		fmt.Fprintln(console, ReadyMarker)
		return nil
	}
	var skip []string
	if mode != ModeWarm {
		skip = append(skip, "virtio_console.ko") // only the warm control port is a virtio-serial port
	}
	if err := loadModules("/lib/modules", "load.order", skip, stage); err != nil {
		fmt.Fprintln(console, "wovyr-guest init:", err)
		return err
	}
	vnet, err := loadNet(stage)
	if err != nil {
		fmt.Fprintln(console, "wovyr-guest init:", err)
		return err
	}
	stage("modules loaded")
	need := []string{SerialRoot, SerialScratch}
	if mode == ModeOneShot {
		need = append(need, SerialJob, SerialResult)
	}
	disks, err := waitDisks(need, 10*time.Second)
	if err != nil {
		fmt.Fprintln(console, "wovyr-guest init:", err)
		return err
	}
	stage("disks found")
	setupErr := enterRoot(disks[SerialRoot], disks[SerialScratch])
	stage("root mounted")
	if setupErr == nil && vnet != nil {
		setupErr = configureNet(*vnet)
		stage("network configured")
	}
	if setupErr == nil {
		setupErr = prepareJobCgroup()
	}
	stage("cgroup ready")
	switch mode {
	case ModeOneShot:
		err = oneShot(ctx, disks[SerialJob], disks[SerialResult], setupErr, stage)
	case ModeWarm:
		err = serveWarm(ctx, setupErr)
	default:
		err = fmt.Errorf("unknown %s=%q", CmdlineMode, mode)
	}
	stage("done")
	if err != nil {
		fmt.Fprintln(console, "wovyr-guest init:", err)
	}
	return err
}

func openConsole() io.Writer {
	f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		return io.Discard
	}
	return f
}

// powerOff powers off; with QEMU's -no-reboot a restart also ends the VM,
// so that is the fallback. Nothing is synced: the one-shot result disk is
// synced when written, and every other writable disk is thrown away.
func powerOff() {
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

func cmdlineValue(key string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// loadModules loads dir's modules in the order the file list names them
// (dependencies first, as the image builder wrote it), but those in skip.
// One at a time: the guest's vCPU does not idle while a module loads (no
// I/O waits to overlap), so loading them concurrently gains nothing.
func loadModules(dir, list string, skip []string, stage func(string)) error {
	f, err := os.Open(filepath.Join(dir, list))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || slices.Contains(skip, name) {
			continue
		}
		m, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		// The image builder paired the modules with this kernel: skip
		// checking each imported symbol's version (quadratic in the
		// imports, slow under TCG). It taints the kernel, as the stripped
		// signatures do; the kernel then also skips the module's trace
		// events.
		err = unix.FinitModule(int(m.Fd()), "", unix.MODULE_INIT_IGNORE_MODVERSIONS)
		m.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load module %s: %w", name, err)
		}
		stage("module " + name)
	}
	return sc.Err()
}

// waitDisks maps disk serials to device paths, waiting for the virtio
// devices to appear.
func waitDisks(need []string, limit time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(limit)
	for {
		found := map[string]string{}
		ents, _ := os.ReadDir("/sys/block")
		for _, e := range ents {
			s, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
			if err == nil {
				found[strings.TrimSpace(string(s))] = "/dev/" + e.Name()
			}
		}
		missing := ""
		for _, n := range need {
			if _, ok := found[n]; !ok {
				missing = n
			}
		}
		if missing == "" {
			return found, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("disk %s did not appear (found %v)", missing, found)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// enterRoot mounts the read-only root disk as the lower layer of an overlay
// whose upper layer lives on the scratch disk, and chroots into it.
func enterRoot(rootDev, scratchDev string) error {
	const lower, scratch, merged = "/mnt/lower", "/mnt/scratch", "/newroot"
	for _, d := range []string{lower, scratch, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(rootDev, lower, "ext4", unix.MS_RDONLY|unix.MS_NODEV, "noload"); err != nil {
		return fmt.Errorf("mount root disk %s: %w", rootDev, err)
	}
	// noinit_itable: no kernel thread zeroing the fresh disk's inode
	// tables in the background (mkfs leaves them to it), which under TCG
	// competes with the job for the one vCPU; the disk dies with the VM.
	if err := unix.Mount(scratchDev, scratch, "ext4", unix.MS_NODEV, "noinit_itable"); err != nil {
		return fmt.Errorf("mount scratch disk %s: %w", scratchDev, err)
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(scratch, d), 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + scratch + "/upper,workdir=" + scratch + "/work"
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "proc", "proc"}, {"sysfs", "sys", "sysfs"}, {"devtmpfs", "dev", "devtmpfs"},
	} {
		p := filepath.Join(merged, m.dst)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, p, m.fs, unix.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("mount %s: %w", p, err)
		}
	}
	// /tmp is 1777 whatever the template says: os.MkdirAll cannot set the
	// sticky bit (Go's FileMode spells it ModeSticky, not 0o1000), and a
	// template's /tmp may have lost it; a tool expects it as on any Unix.
	tmp := filepath.Join(merged, "tmp")
	if err := os.MkdirAll(tmp, 0o777); err != nil {
		return err
	}
	if err := unix.Chmod(tmp, sandbox.TmpMode); err != nil {
		return fmt.Errorf("chmod /tmp: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(merged, GuestWorkDir), 0o755); err != nil {
		return err
	}
	if err := bindGuestAgent(merged); err != nil {
		return err
	}
	if err := unix.Chroot(merged); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	return sameEnvironment()
}

// bindGuestAgent makes this binary (the initramfs's /init) visible to jobs
// at GuestAgentPath, read-only, where an OCI sandbox has it: the battery's
// prober runs inside the VM as it does in a container (issue #24), and
// nothing the job does to its copy reaches the init that serves it.
func bindGuestAgent(root string) error {
	dst := filepath.Join(root, GuestAgentPath)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(dst, nil, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("/init", dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the guest agent: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("bind the guest agent read-only: %w", err)
	}
	return nil
}

// sameEnvironment gives the VM what a container or gVisor sandbox has
// from its runtime: the hostname, and loopback up (a tool that starts a
// local server and talks to it over 127.0.0.1 must work on every tier;
// with no NIC the VM had lo down and "Network is unreachable").
func sameEnvironment() error {
	if err := unix.Sethostname([]byte(sandbox.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	return loopbackUp()
}
