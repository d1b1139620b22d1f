package microvm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/hostlock"
	"github.com/wovyr/wovyr/sandbox"
)

// ensureUser returns the uid and gid of the VMM account, creating it as a
// system user without a home or login shell if it does not exist. The
// account owns nothing: QEMU receives every file as a descriptor.
func ensureUser(ctx context.Context, name string) (uid, gid uint32, err error) {
	if _, err := user.Lookup(name); err != nil {
		out, cerr := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if cerr != nil {
			return 0, 0, fmt.Errorf("microvm: create user %s: %w: %s", name, cerr, strings.TrimSpace(string(out)))
		}
	}
	return lookupUser(name)
}

// lookupUser returns the ids of the existing account name, which must be
// unprivileged.
func lookupUser(name string) (uid, gid uint32, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("microvm: user %s: %w", name, err)
	}
	id, err1 := strconv.ParseUint(u.Uid, 10, 32)
	g, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || id == 0 || g == 0 {
		return 0, 0, fmt.Errorf("microvm: user %s has uid %s gid %s; it must be unprivileged", name, u.Uid, u.Gid)
	}
	return uint32(id), uint32(g), nil
}

// uidLocks is where VM uids are locked: host-wide, not in a state
// directory, so that two daemons (or test runs) with different state
// directories never run two live VMs under one uid (a QEMU could signal or
// trace its neighbour otherwise).
const uidLocks = "/run/wovyr/microvm-uids"

// claimUID reserves one uid of [base, base+count) for a VM: it creates the
// uid's entry in the VMs directory (atomic: mkdir; named for Reconcile) and
// holds the uid's host-wide lock (package hostlock) until release, so no
// two live VMs on the host share a uid.
func claimUID(stateDir string, base, count uint32) (uid uint32, release func(), err error) {
	dir := vmsDir(stateDir)
	for _, d := range []string{dir, uidLocks} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return 0, nil, err
		}
	}
	var r [4]byte
	rand.Read(r[:])
	start := binary.BigEndian.Uint32(r[:]) % count
	for i := range count {
		u := base + (start+i)%count
		name := strconv.FormatUint(uint64(u), 10)
		p := filepath.Join(dir, "wovyr-uid-"+name)
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("microvm: claim uid: %w", err)
		}
		lock, err := hostlock.Try(filepath.Join(uidLocks, name+".lock"), hostlock.Exclusive)
		if err != nil || lock == nil {
			os.Remove(p)
			if err != nil {
				return 0, nil, fmt.Errorf("microvm: claim uid: %w", err)
			}
			continue // a VM of another wovyr process has it
		}
		return u, func() { os.Remove(p); lock.Close() }, nil
	}
	return 0, nil, fmt.Errorf("microvm: all %d VM uids from %d are in use", count, base)
}

// vmUser returns the credentials for one VM: a uid and gid of its own
// (BATTERY probe 49), or the shared account with Config.SharedUser.
func (b *Backend) vmUser(p *probed) (uid, gid uint32, release func(), err error) {
	if b.cfg.weak == battery.RunAsRoot {
		return 0, 0, func() {}, nil
	}
	if b.cfg.SharedUser {
		return p.uid, p.gid, func() {}, nil
	}
	u, rel, err := claimUID(b.cfg.StateDir, b.cfg.UIDBase, b.cfg.UIDCount)
	if err != nil {
		return 0, 0, nil, sandbox.Wrap(sandbox.BackendFailure, err, "VM credentials")
	}
	return u, u, rel, nil
}
