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

	"github.com/wovyr/wovyr/vmm"
)

// Reconcile removes what a previous wovyr left behind: VMM processes in
// wovyr-microvm cgroups and those cgroups, QEMU processes named wovyr-*
// outside them, and per-VM directories under stateDir. Call it at start-up,
// before any VM of this process exists; it touches nothing else.
func Reconcile(ctx context.Context, stateDir string) error {
	var errs []error
	if err := vmm.ReconcileCgroups(); err != nil {
		errs = append(errs, err)
	}
	for _, pid := range strayVMMs() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(vmsDir(stateDir), "wovyr-vm-*"))
	for _, d := range dirs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// strayVMMs finds QEMU processes whose -name is wovyr-*: started by wovyr.
func strayVMMs() []int {
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
		if string(args[1]) == "-name" && strings.HasPrefix(string(args[2]), "wovyr-") {
			out = append(out, pid)
		}
	}
	return out
}
