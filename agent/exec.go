package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// defaultPath is used to find argv[0] when the job's env has no PATH.
const defaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

// Execute runs one job to completion inside the sandbox and never panics on
// bad input: a job that cannot start yields a Reply with Error set.
func Execute(ctx context.Context, job Job) Reply { return execute(ctx, job, nil, nil) }

// emitFunc receives a streaming job's output as the job's caps keep it:
// fd 1 or 2, and bytes valid during the call only.
type emitFunc func(fd int, p []byte)

// waitDelay is how long output pipes may stay open after the job's leader
// exited (a grandchild holding them) before the job's group is killed.
const waitDelay = 100 * time.Millisecond

// execute is Execute; attr, if set, adds to the child's SysProcAttr (the
// microVM's agent starts the job inside its cgroup); emit, if set, gets the
// output as it is read (a streaming job's): the reply's output bytes are
// then left empty.
//
// The job's stdout and stderr are raw pipes drained here with poll(2), and
// its exit is one more descriptor in the same poll; no goroutine copies
// output and the runtime's poller is not involved. Under gVisor every
// goroutine hand-off and poller wake-up is a round trip through the
// Sentry: os/exec's copy goroutines cost ≈ 1.5 ms of a ≈ 12 ms exec there.
func execute(ctx context.Context, job Job, attr func(*syscall.SysProcAttr), emit emitFunc) Reply {
	rep := Reply{ID: job.ID}
	if len(job.Argv) == 0 {
		rep.ExitCode, rep.Error = 127, "empty argv"
		return rep
	}
	if err := writeFiles(job.Dir, job.Files); err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	prog, err := LookPath(job.Argv[0], job.Env)
	if err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	var fds fdSet
	defer fds.closeAll()
	stdinR, stdinW, err := fds.input(len(job.Stdin) > 0)
	if err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	outR, outW, err1 := fds.pipe()
	errR, errW, err2 := fds.pipe()
	exitR, exitW, err3 := fds.pipe()
	wakeR, wakeW, err4 := fds.pipe()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	sys := &syscall.SysProcAttr{Setpgid: true} // its own group: a deadline kills the tree
	if attr != nil {
		attr(sys)
	}
	env := job.Env
	if env == nil {
		env = []string{} // nothing inherited
	}
	start := time.Now()
	// The leader's exit closes exitW (the waiter holds its only copy) and
	// then reaped; ctx closes wakeW.
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	reaped := make(chan struct{})
	started := make(chan forked, 1)
	go func() {
		defer close(reaped)
		forkAndWait(prog, job.Argv, &syscall.ProcAttr{Dir: job.Dir, Env: env,
			Files: []uintptr{uintptr(stdinR), uintptr(outW), uintptr(errW)}, Sys: sys}, started, &ws, &ru, job.TraceStopIsExit)
		fds.close(exitW)
	}()
	f := <-started
	defer threadGone(f.tid)
	if f.err != nil {
		<-reaped
		rep.ExitCode, rep.Error = 127, fmt.Sprintf("fork/exec %s: %v", prog, f.err)
		return rep
	}
	pid := f.pid
	fds.close(stdinR, outW, errW)
	killGroup := func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }
	defer killGroup() // whatever the leader did, nothing of the job outlives it
	stopWake := context.AfterFunc(ctx, func() { fds.close(wakeW) })
	defer stopWake()
	if stdinW >= 0 {
		// An os.File, whose Close never frees the descriptor under a
		// Write still in progress: the writer may outlive this call (a
		// leftover holding the pipe), and its descriptor must not be
		// reused meanwhile. EPIPE from a job that never reads its stdin is
		// not an error.
		in := os.NewFile(uintptr(fds.release(stdinW)), "stdin")
		go func() {
			_, _ = in.Write(job.Stdin)
			in.Close()
		}()
		defer in.Close()
	}

	stdout, stderr := &sandbox.Capped{Limit: job.Output}, &sandbox.Capped{Limit: job.Output}
	if emit != nil {
		stdout.Emit = func(p []byte) { emit(1, p) }
		stderr.Emit = func(p []byte) { emit(2, p) }
	}
	var deadline time.Time
	if job.Wall > 0 {
		deadline = start.Add(job.Wall)
	}
	var exited time.Time // zero until the leader is reaped
	pfd := []unix.PollFd{{Fd: int32(outR), Events: unix.POLLIN}, {Fd: int32(errR), Events: unix.POLLIN},
		{Fd: int32(exitR), Events: unix.POLLIN}, {Fd: int32(wakeR), Events: unix.POLLIN}}
	sinks := []*sandbox.Capped{stdout, stderr}
	buf := make([]byte, 64<<10)
	killed := false
	for {
		if !exited.IsZero() && (pfd[0].Fd < 0 && pfd[1].Fd < 0 || time.Since(exited) >= waitDelay) {
			break
		}
		timeout := -1
		switch {
		case !exited.IsZero():
			timeout = msUntil(exited.Add(waitDelay))
		case !deadline.IsZero() && !killed:
			timeout = msUntil(deadline)
		}
		_, err := unix.Poll(pfd, timeout)
		if err != nil && err != unix.EINTR {
			killGroup()
			rep.Error = fmt.Sprintf("poll: %v", err)
			break
		}
		for i := 0; i < 2; i++ {
			if pfd[i].Fd >= 0 && pfd[i].Revents != 0 {
				n, rerr := syscall.Read(int(pfd[i].Fd), buf)
				if n > 0 {
					_, _ = sinks[i].Write(buf[:n])
				} else if rerr != syscall.EINTR && rerr != syscall.EAGAIN {
					pfd[i].Fd = -1 // EOF (or a broken pipe): done with it
				}
			}
		}
		if pfd[2].Fd >= 0 && pfd[2].Revents != 0 {
			pfd[2].Fd = -1
			exited = time.Now()
		}
		if !killed && (pfd[3].Fd >= 0 && pfd[3].Revents != 0 || !deadline.IsZero() && !time.Now().Before(deadline)) {
			rep.TimedOut = ctx.Err() == nil
			killed = true
			pfd[3].Fd = -1
			killGroup()
		}
	}
	if exited.IsZero() {
		killGroup()
	}
	<-reaped // ws and ru are set
	rep.Wall = time.Since(start)
	rep.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rep.MaxRSS = ru.Maxrss * 1024
	switch {
	case ws.Signaled():
		rep.Signal = ws.Signal().String()
		rep.ExitCode = 128 + int(ws.Signal())
	default:
		rep.ExitCode = ws.ExitStatus()
	}
	rep.StdoutTruncated, rep.StderrTruncated = stdout.Truncated, stderr.Truncated
	if emit == nil {
		rep.Stdout, rep.Stderr = stdout.Bytes(), stderr.Bytes()
	}
	return rep
}

func msUntil(t time.Time) int {
	d := time.Until(t)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// fdSet holds the raw descriptors of one job, each closed exactly once,
// whichever goroutine closes it first.
type fdSet struct {
	mu   sync.Mutex
	open map[int]bool
}

// pipe makes a close-on-exec pipe.
func (s *fdSet) pipe() (r, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	s.add(p[0])
	s.add(p[1])
	return p[0], p[1], nil
}

// input is the job's stdin: a pipe when it has input (w is its write end),
// /dev/null otherwise (w is -1).
func (s *fdSet) input(hasInput bool) (r, w int, err error) {
	if hasInput {
		return s.pipe()
	}
	fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	s.add(fd)
	return fd, -1, nil
}

func (s *fdSet) add(fd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[int]bool{}
	}
	s.open[fd] = true
}

// close closes fds still open in the set.
func (s *fdSet) close(fds ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fd := range fds {
		if s.open[fd] {
			syscall.Close(fd)
			delete(s.open, fd)
		}
	}
}

// release removes fd from the set without closing it: its new owner closes
// it.
func (s *fdSet) release(fd int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, fd)
	return fd
}

func (s *fdSet) closeAll() {
	s.mu.Lock()
	fds := make([]int, 0, len(s.open))
	for fd := range s.open {
		fds = append(fds, fd)
	}
	s.mu.Unlock()
	s.close(fds...)
}

// LookPath resolves argv0 against the PATH in env (not the agent's own).
func LookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	return lookPath(argv0, env, func(f string) (fs.FileMode, error) {
		st, err := os.Stat(f)
		if err != nil {
			return 0, err
		}
		return st.Mode(), nil
	})
}

func lookPath(argv0 string, env []string, mode func(string) (fs.FileMode, error)) (string, error) {
	for _, dir := range filepath.SplitList(pathOf(env)) {
		if dir == "" {
			continue
		}
		f := filepath.Join(dir, argv0)
		if m, err := mode(f); err == nil && m.IsRegular() && m&0o111 != 0 {
			return f, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", argv0)
}

// pathOf is the PATH a job with env searches: its own, else defaultPath.
func pathOf(env []string) string {
	p := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	return p
}

// LookPathIn resolves argv0 as the agent would for a job in dir (an
// absolute path inside the sandbox) had it run there, but from outside:
// inside the root filesystem at root, every path and symlink resolved as in
// a chroot to it (openat2 RESOLVE_IN_ROOT). It also refuses what execve
// would: a file that is neither ELF nor a "#!" script, and a script whose
// interpreter is missing. Its errors read as the agent's reply would:
// "x: command not found", "fork/exec /x: permission denied". The host uses
// it to start a one-shot workload as the container's init (backend/oci),
// where nothing has run yet and a runtime's own exec failure would read as
// the workload's exit status.
//
// mounts are what the sandbox mounts over root, by destination: a bind
// mount's host source, or "" for a filesystem that starts empty (tmpfs,
// proc, …). A path at or below one is looked up there (by its lexical
// path; a symlink in root into a mount is judged by root's own view).
func LookPathIn(root, dir, argv0 string, env []string, mounts map[string]string) (string, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open root: %w", err)
	}
	defer unix.Close(rfd)
	open := func(p string, flags int) (int, error) {
		if src, rel, ok := mountOf(mounts, p); ok {
			if src == "" {
				return -1, syscall.ENOENT
			}
			return unix.Open(filepath.Join(src, rel), flags|unix.O_CLOEXEC, 0)
		}
		return unix.Openat2(rfd, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT})
	}
	mode := func(p string) (fs.FileMode, error) {
		fd, err := open(p, unix.O_PATH)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, err
		}
		m := fs.FileMode(st.Mode & 0o777)
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			m |= fs.ModeIrregular
		}
		return m, nil
	}
	prog := argv0
	searched := !strings.Contains(argv0, "/")
	if searched {
		if prog, err = lookPath(argv0, env, mode); err != nil {
			return "", err
		}
	}
	p := prog
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if !searched { // lookPath checked what it found
		m, err := mode(p)
		switch {
		case err != nil:
			return "", fmt.Errorf("fork/exec %s: %w", argv0, err)
		case !m.IsRegular() || m&0o111 == 0:
			return "", fmt.Errorf("fork/exec %s: %w", argv0, syscall.EACCES)
		}
	}
	if err := execFormat(p, open, mode); err != nil {
		return "", fmt.Errorf("fork/exec %s: %w", prog, err)
	}
	return prog, nil
}

// mountOf finds the deepest of mounts at or above the absolute path p and
// returns its source and p relative to it.
func mountOf(mounts map[string]string, p string) (src, rel string, ok bool) {
	p = filepath.Clean(p)
	best := ""
	for dest := range mounts {
		d := filepath.Clean(dest)
		if d != "/" && (p == d || strings.HasPrefix(p, d+"/")) && len(d) > len(best) {
			best = d
		}
	}
	if best == "" {
		return "", "", false
	}
	return mounts[best], strings.TrimPrefix(strings.TrimPrefix(p, best), "/"), true
}

// execFormat is execve's verdict on the file at p from its first bytes: an
// ELF binary, or a "#!" script whose interpreter is an executable file.
func execFormat(p string, open func(string, int) (int, error), mode func(string) (fs.FileMode, error)) error {
	fd, err := open(p, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return err
	}
	var head [256]byte
	n, err := unix.Pread(fd, head[:], 0)
	unix.Close(fd)
	if err != nil {
		return err
	}
	b := head[:n]
	switch {
	case strings.HasPrefix(string(b), "\x7fELF"):
		return nil
	case strings.HasPrefix(string(b), "#!"):
		line, _, _ := strings.Cut(string(b[2:]), "\n")
		f := strings.Fields(line)
		if len(f) == 0 {
			return syscall.ENOEXEC
		}
		m, err := mode(f[0])
		if err != nil {
			return syscall.ENOENT // as execve reports a missing interpreter
		}
		if !m.IsRegular() || m&0o111 == 0 {
			return syscall.EACCES
		}
		return nil
	}
	return syscall.ENOEXEC
}

func writeFiles(dir string, files []File) error {
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open workdir: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		if err := sandbox.ValidatePath(f.Path); err != nil {
			return err
		}
		if d := filepath.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("file %s: %w", f.Path, err)
			}
		}
		mode := os.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o644
		}
		var err error
		if f.From != "" {
			err = placeFile(root, f.Path, f.From, mode)
		} else {
			err = root.WriteFile(f.Path, f.Data, mode)
		}
		if err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	return nil
}

// placeFile moves from (a file the host placed, never a link) to path in
// root with mode: renamed where both are on one filesystem (the file the
// host wrote counts against the sandbox's disk until it is gone), else
// copied and removed.
func placeFile(root *os.Root, path, from string, mode os.FileMode) error {
	src, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer os.Remove(from)
	defer src.Close()
	// Renamed only into the root itself: a name in a directory below
	// could lead, through a link a session's command made, out of it.
	if filepath.Dir(path) == "." {
		if _, err := root.Lstat(path); errors.Is(err, fs.ErrNotExist) && os.Rename(from, filepath.Join(root.Name(), path)) == nil {
			fi, err := root.Lstat(path)
			if err == nil && fi.Mode().Perm() != mode.Perm() {
				err = root.Chmod(path, mode)
			}
			return err
		}
	}
	dst, err := root.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}
