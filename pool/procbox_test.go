package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// procbox is a test sandbox that really holds state, so the cross-tenant
// test means something before a real backend exists: a workspace directory,
// a private TMPDIR under /tmp/wovyr-*, a "memory" segment on /dev/shm, an
// environment that persists from claim to claim (as an in-sandbox agent's
// would), and the processes it started, background ones included.
type procbox struct {
	mu    sync.Mutex
	ws    string // workspace: the workload's cwd
	tmp   string // its TMPDIR
	mem   string // memory segment, exposed as WOVYR_MEM
	env   []string
	pgids []int
}

// procboxFactory makes procboxes; reset picks the Resetter: "" (none, so
// the pool destroys after use), "verified" (wipes and checks) or "lying"
// (claims success and does nothing: the positive control).
func procboxFactory(reset string) Factory {
	return func(ctx context.Context) (sandbox.Sandbox, error) {
		ws, err := os.MkdirTemp("", "wovyr-pooltest-*")
		if err != nil {
			return nil, err
		}
		b := &procbox{ws: ws, tmp: ws + "-tmp", mem: "/dev/shm/" + filepath.Base(ws)}
		if err := os.Mkdir(b.tmp, 0o700); err != nil {
			b.Destroy(ctx)
			return nil, err
		}
		if err := os.WriteFile(b.mem, make([]byte, 4096), 0o600); err != nil {
			b.Destroy(ctx)
			return nil, err
		}
		switch reset {
		case "verified":
			return &verifiedProcbox{b}, nil
		case "lying":
			return &lyingProcbox{b}, nil
		}
		return b, nil
	}
}

func (b *procbox) Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.env = append(b.env, inv.Workload.Env...) // claim-time policy, kept by the "agent"
	cmd := exec.CommandContext(ctx, inv.Workload.Argv[0], inv.Workload.Argv[1:]...)
	cmd.Dir = b.ws
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "TMPDIR=" + b.tmp, "WOVYR_MEM=" + b.mem}, b.env...)
	cmd.Stdin = bytes.NewReader(inv.Workload.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "start")
	}
	b.pgids = append(b.pgids, cmd.Process.Pid)
	err := cmd.Wait()
	res := &sandbox.Result{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wait")
	}
	return res, nil
}

// kill ends every process group the box started and waits until none of
// their members is still running (zombies awaiting a reaper do not count).
func (b *procbox) kill() error {
	for _, g := range b.pgids {
		syscall.Kill(-g, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := livingInGroups(b.pgids)
		if alive == 0 {
			b.pgids = nil
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes survived SIGKILL", alive)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func livingInGroups(pgids []int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		pg, _ := strconv.Atoi(f[2])
		for _, g := range pgids {
			if pg == g {
				n++
			}
		}
	}
	return n
}

func (b *procbox) Destroy(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.kill(), os.RemoveAll(b.ws), os.RemoveAll(b.tmp), rmIfExists(b.mem))
}

func rmIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

type verifiedProcbox struct{ *procbox }

// Reset wipes every place state can live and then checks that it is gone.
func (v *verifiedProcbox) Reset(context.Context) error {
	b := v.procbox
	b.mu.Lock()
	defer b.mu.Unlock()
	b.env = nil
	if err := b.kill(); err != nil {
		return err
	}
	for _, dir := range []string{b.ws, b.tmp} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			return fmt.Errorf("%s not empty after wipe", dir)
		}
	}
	if err := os.WriteFile(b.mem, make([]byte, 4096), 0o600); err != nil {
		return err
	}
	if m, err := os.ReadFile(b.mem); err != nil || !bytes.Equal(m, make([]byte, 4096)) {
		return fmt.Errorf("memory not zeroed: %v", err)
	}
	return nil
}

type lyingProcbox struct{ *procbox }

func (*lyingProcbox) Reset(context.Context) error { return nil }
