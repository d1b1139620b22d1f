package microvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/wovyr/wovyr/snapshot"
	"github.com/wovyr/wovyr/vmm"
)

// Reconcile removes what a crashed wovyr using stateDir left behind. Every
// VM (sandbox, probe or battery control) has a per-VM entry named like its
// VM in stateDir/microvm, removed only after the VM is gone; for each one
// left, Reconcile kills the VM's cgroup and any QEMU process of that name,
// then removes the entry. VMs of other state directories are not touched,
// so a second wovyr (or a parallel test) on the same host is safe.
func Reconcile(ctx context.Context, stateDir string) error {
	entries, _ := filepath.Glob(filepath.Join(vmsDir(stateDir), "wovyr-*"))
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		name := strings.TrimSuffix(filepath.Base(e), ".ext4")
		if err := vmm.RemoveCgroup(ctx, name); err != nil {
			errs = append(errs, err)
		}
		for _, pid := range vmmProcesses(func(n string) bool { return n == name }) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(e); err != nil {
			errs = append(errs, err)
		}
	}
	// Golden snapshots a dead process was building.
	if store, err := snapshot.Open(snapshotsDir(stateDir)); err != nil {
		errs = append(errs, err)
	} else {
		if _, err := store.Reconcile("microvm", nil); err != nil {
			errs = append(errs, err)
		}
		if err := store.ReconcilePaused("microvm"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// vmmProcesses finds QEMU processes whose -name matches.
func vmmProcesses(match func(name string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if len(args) < 3 || !strings.HasPrefix(filepath.Base(string(args[0])), "qemu-system") {
			continue
		}
		if string(args[1]) == "-name" && match(string(args[2])) {
			out = append(out, pid)
		}
	}
	return out
}

// Reconcile removes what crashed VMs of this backend's state directory
// left, and the root disks of templates that are gone or that a dead
// builder left half-made; the daemon calls it at start-up.
func (b *Backend) Reconcile(ctx context.Context) error {
	return errors.Join(Reconcile(ctx, b.cfg.StateDir), b.disks.reconcile())
}
