package wasm

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// WorkerMain is the worker process's main (`wovyr wasm-worker`, started by a
// Backend whose Config.Worker names it; WorkerEnv is set). It reads the
// engine to build, then runs jobs one at a time from in, answering on out,
// until in ends. Before each job it lowers its own RLIMIT_NOFILE soft limit
// to the descriptors it holds plus the job's Limits.NoFile, so a guest that
// opens files until failure gets EMFILE here, in this process, and nowhere
// else; the limit is put back after the store (and every guest descriptor)
// is gone. It returns the exit code.
func WorkerMain(ctx context.Context, in io.Reader, out io.Writer) int {
	dec, enc := gob.NewDecoder(in), gob.NewEncoder(out)
	var ini workerInit
	if err := dec.Decode(&ini); err != nil {
		return ExitUsage
	}
	b, err := New(Config{StateDir: ini.StateDir, Engine: ini.Engine, EpochTick: ini.EpochTick})
	if err != nil {
		_ = enc.Encode(&workerReply{Err: err.Error()})
		return ExitBackendFailure
	}
	defer b.Close()
	if err := enc.Encode(&workerReply{}); err != nil {
		return ExitBackendFailure
	}
	fds := &fdBaseline{}
	for ctx.Err() == nil {
		var j workerJob
		if err := dec.Decode(&j); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			return ExitBackendFailure
		}
		// Acknowledge before running, so the parent can tell a worker that
		// died idle (the job never ran: retry elsewhere) from one that died
		// running it.
		if err := enc.Encode(&workerReply{Accepted: true}); err != nil {
			return ExitBackendFailure
		}
		r := b.runJob(&j, fds)
		if err := enc.Encode(&r); err != nil {
			return ExitBackendFailure
		}
	}
	return ExitKilled
}

// fdBaseline is the descriptors the worker itself holds between jobs.
// Listing /proc/self/fd is the costliest step of a job, so it is redone only
// after the module cache compiled or loaded something (the only work between
// jobs that may keep a descriptor). A descriptor opened since only tightens
// the guest's bound; one closed since (the listing's own) loosens it by one.
type fdBaseline struct {
	held []uint64
	gen  int64 // the cache's compiled+loaded when held was listed
	ok   bool  // held was listed
}

func (f *fdBaseline) get(c *cache) ([]uint64, error) {
	gen := c.compiled.Load() + c.loaded.Load()
	if f.ok && f.gen == gen {
		return f.held, nil
	}
	f.held = f.held[:0]
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil { // no /proc (the runner in a bare chroot): ask each number
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return nil, fmt.Errorf("count descriptors: %w", err)
		}
		for fd := uint64(0); fd < min(lim.Cur, 1<<20); fd++ {
			if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); e == 0 {
				f.held = append(f.held, fd)
			}
		}
	}
	for _, e := range ents {
		if fd, err := strconv.ParseUint(e.Name(), 10, 64); err == nil {
			f.held = append(f.held, fd)
		}
	}
	f.gen, f.ok = gen, true
	return f.held, nil
}

// runJob runs one job under the descriptor bound.
func (b *Backend) runJob(j *workerJob, fds *fdBaseline) workerReply {
	if err := b.started(); err != nil {
		return workerReply{Err: err.Error()}
	}
	e, err := b.modules.acquire(j.Module)
	if err != nil {
		return workerReply{Err: err.Error()}
	}
	defer b.modules.release(e)
	held, err := fds.get(b.modules)
	if err != nil {
		return workerReply{Err: err.Error()}
	}
	restore, err := boundFDs(j.NoFile, held)
	if err != nil {
		return workerReply{Err: err.Error()}
	}
	b.begin()
	out := e.pre.Run(context.Background(), &j.Spec) // the store, and its fds, are gone on return
	b.end()
	if err := restore(); err != nil {
		return workerReply{Err: err.Error()}
	}
	return workerReply{Outcome: out}
}

// boundFDs sets this process's RLIMIT_NOFILE soft limit so that n more
// descriptors can be opened beside held, and returns how to put it back. A process may
// always move its own soft limit up to its hard limit, so this needs no
// privilege (wovyr may run without CAP_SYS_RESOURCE).
func boundFDs(n int, held []uint64) (func() error, error) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		return nil, fmt.Errorf("getrlimit: %w", err)
	}
	// The kernel bounds descriptor numbers, not their count: find the soft
	// limit below which exactly n numbers are free.
	soft := uint64(n)
	for {
		k := uint64(0)
		for _, fd := range held {
			if fd < soft {
				k++
			}
		}
		if uint64(n)+k == soft {
			break
		}
		soft = uint64(n) + k
	}
	if soft > old.Max {
		return nil, fmt.Errorf("nofile %d above the hard limit %d", soft, old.Max)
	}
	lim := syscall.Rlimit{Cur: soft, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, fmt.Errorf("setrlimit: %w", err)
	}
	return func() error { return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) }, nil
}

// reconcileWorkers kills worker processes of stateDir that are not this
// process's children: orphans of a crashed parent that outlived it.
func reconcileWorkers(stateDir string) (int, error) {
	mark := []byte(WorkerEnv + "=" + stateDir + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	var errs []error
	for _, d := range procs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, mark...)) {
			continue
		}
		if ppid(d) == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ppid reads the parent pid from /proc/PID/stat (after the command name).
func ppid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	var state string
	var pp int
	if _, err := fmt.Sscanf(string(b[i+1:]), " %s %d", &state, &pp); err != nil {
		return -1
	}
	return pp
}
