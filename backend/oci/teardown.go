package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// stop kills the container. Under runc/crun it returns once the agent —
// the pid namespace's init, whose death the kernel completes only after
// every other member is gone — is dead, leaving the foreground runtime to
// finish its own teardown while Destroy goes on (reap waits for it);
// otherwise it waits for the runtime to exit.
func (s *Sandbox) stop(ctx context.Context) error {
	if s.runtime == nil {
		return nil
	}
	select {
	case <-s.runtime:
		return nil
	default:
	}
	// Through pidfds, so a recycled pid can never be hit.
	if !s.killAgent() {
		_ = s.d.run(ctx, 5*time.Second, "kill", s.id, "KILL")
	} else if s.agentFD >= 0 {
		fds := []unix.PollFd{{Fd: int32(s.agentFD), Events: unix.POLLIN}}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1); n > 0 || err != nil && err != unix.EINTR {
				return nil
			}
		}
	}
	select {
	case <-s.runtime:
	case <-time.After(10 * time.Second):
	}
	return nil
}

// reap waits for the foreground runtime to exit and deletes by force
// whatever runtime state it left.
func (s *Sandbox) reap(ctx context.Context) error {
	if s.runtime != nil {
		select {
		case <-s.runtime:
		case <-time.After(10 * time.Second):
		}
	}
	if s.agentFD >= 0 {
		unix.Close(s.agentFD)
		s.agentFD = -1
	}
	if !s.d.exists(s.id) {
		return nil
	}
	return s.d.destroy(ctx, s.id)
}

// killAgent SIGKILLs the container's init (runc/crun) or every process
// in the runtime's cgroup (runsc: Sentry, gofer and their helpers), so
// the foreground runtime sees its sandbox die and tears it down. It saves
// starting a "<runtime> kill" (tens of ms under load); it reports false
// where there was nothing to signal.
func (s *Sandbox) killAgent() bool {
	if s.agentFD >= 0 {
		return unix.PidfdSendSignal(s.agentFD, unix.SIGKILL, nil, 0) == nil
	}
	return s.b.gvisor && s.killTree()
}

// killTree SIGKILLs every process in the runtime's cgroup and below it,
// through pidfds; it reports whether there was one.
func (s *Sandbox) killTree() bool {
	killed := false
	for _, p := range treeProcs(poolCgroup(s.id)) {
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			continue
		}
		killed = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil || killed
		unix.Close(fd)
	}
	return killed
}

// Destroy implements sandbox.Sandbox: kill and delete the container, remove
// its cgroups, mounts and scratch, and free its uid range. Idempotent; it
// ignores ctx's cancellation (cleanup must finish).
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	s.gone = true
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		if err := s.cleanup[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.tenant != nil && s.tenant.Path() != sandboxCgroup(s.id) {
		// The KeepOrphans positive control's own tenant group: it does
		// not hunt down what escaped its (absent) pid namespace. The
		// battery kills the orphan right after this; the group goes once
		// it is empty (else Reconcile).
		go removeWhenEmpty(s.tenant.Path(), time.Minute)
	}
	if s.agentPID != 0 {
		// The init's death takes its pid namespace with it (the kernel
		// reaps every member first); only its own zombie, which the host's
		// reaper collects, may outlive it.
		errs = append(errs, waitDead(s.agentPID, 5*time.Second))
	}
	if s.lock != nil {
		s.lock.Close()
	}
	if err := errors.Join(errs...); err != nil {
		s.b.cfg.Logger.Warn("sandbox destroy", "id", s.id, "err", err)
		return sandbox.Wrap(sandbox.BackendFailure, err, "%s: destroy %s", s.b.name, s.id)
	}
	return nil
}

// waitDead waits until pid has exited (gone or a zombie).
func waitDead(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent pid %d still alive", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// removeWhenEmpty removes the cgroup rel once no process is left in it, or
// gives up after limit (start-up reconcile removes it then).
func removeWhenEmpty(rel string, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(cgroupProcs(rel)) == 0 {
			_ = removeCgroup(context.Background(), rel)
			return
		}
	}
}
