package agent

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/sandbox"
)

// Procs job operations.
const (
	ProcsList = "list" // every held process, oldest first, without output
	ProcsGet  = "get"  // one, with its output so far
	ProcsKill = "kill" // SIGKILL its whole session, reap, forget; its final state
	// ProcsWrite writes Data to the stdin of one started with OpenStdin,
	// as much as its pipe takes now (never waiting), then closes it if
	// Close and all was written; Reply.Written says how much.
	ProcsWrite = "write"
)

// ProcsJob is one operation on the agent's background processes.
type ProcsJob struct {
	Op    string `json:"op"`
	ID    string `json:"id,omitempty"`    // get, kill and write
	Data  []byte `json:"data,omitempty"`  // write
	Close bool   `json:"close,omitempty"` // write: then end its stdin
}

// A background job runs in a session of its own (setsid), so its session id
// is its leader's pid, and everything it starts stays in that session
// unless it makes a new one. The sweep after a foreground job spares the
// sessions of held background processes (sweep.go) and nothing else.
//
// # Why the leader stays a zombie until it is killed
//
// A session's id is a pid. Once the leader is reaped its pid is free, and
// a foreground leftover that got it and called setsid would have the
// background session's id and be spared. The kernel never reuses a pid
// while a process, a zombie included, still has it, so the agent reads a
// background leader's exit status without reaping it (waitid WNOWAIT) and
// reaps it only when a Procs kill forgets it: for as long as the session
// is spared, its id cannot be anyone else's. A held zombie costs one pid
// of the session's budget, and there are at most sandbox.MaxBackground.
//
// # Why one locked thread
//
// As a foreground leader (forkAndWait), a background leader that calls
// ptrace(PTRACE_TRACEME) makes its forking thread its tracer, and only
// that thread may detach it. Every background leader is forked on the
// keeper's one locked thread, which also waits for them all (woken by
// SIGCHLD): one thread for all of them, never one each, because the
// agent's threads count against the session's process budget (threads.go).
// Their output is drained by goroutines parked in the runtime's poller,
// which hold no thread.

// keeper holds the agent's background processes. There is one per agent
// process (bg): an agent is one sandbox's.
type keeper struct {
	once sync.Once
	req  chan func() // run on the locked thread

	mu    sync.Mutex
	procs map[string]*bgProc
}

var bg = &keeper{procs: map[string]*bgProc{}}

// bgProc is one held background process; its fields below mu are guarded
// by the keeper's mu.
type bgProc struct {
	id      string
	pid     int
	argv    []string
	started time.Time

	exited   time.Time // when its leader's exit was seen; zero while it runs
	ws       waitInfo
	drains   int  // output streams not yet at their end
	frozen   bool // reported ended: its output no longer changes
	ended    time.Time
	stdout   sandbox.Capped
	stderr   sandbox.Capped
	killedUp bool // Kill found it running
	// stdin is the write end of its stdin pipe (OpenStdin), non-blocking,
	// or -1: none, or closed.
	stdin int
}

// waitInfo is how a leader ended: an exit status, or a signal.
type waitInfo struct {
	code   int
	signal syscall.Signal
}

// on runs f on the keeper's locked thread and waits for it.
func (k *keeper) on(f func()) {
	k.once.Do(func() {
		k.req = make(chan func())
		ready := make(chan struct{})
		go k.loop(ready)
		<-ready
	})
	done := make(chan struct{})
	k.req <- func() { f(); close(done) }
	<-done
}

// loop is the keeper's thread: the forks, the waits and the detaches of
// every background leader happen here. It never returns.
func (k *keeper) loop(ready chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: the tracer of every background leader
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	close(ready)
	for {
		select {
		case f := <-k.req:
			f()
		case <-sig:
			k.poll()
		}
	}
}

// held returns the number of held processes.
func (k *keeper) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.procs)
}

// sessions returns the session ids the sweep spares: one per held process.
func (k *keeper) sessions() map[int]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[int]bool, len(k.procs))
	for _, p := range k.procs {
		out[p.pid] = true
	}
	return out
}

// isLeader reports whether pid is a held process's leader (which only a
// kill reaps).
func (k *keeper) isLeader(pid int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.procs {
		if p.pid == pid {
			return true
		}
	}
	return false
}

// start runs job (Background set) as a held background process; attr,
// if set, adds to how it is started (a VM's job cgroup).
func (k *keeper) start(job Job, attr func(*syscall.SysProcAttr)) Reply {
	rep := Reply{ID: job.ID}
	refuse := func(format string, a ...any) Reply {
		rep.ExitCode, rep.Class, rep.Error = 127, sandbox.BadInput, fmt.Sprintf(format, a...)
		return rep
	}
	k.mu.Lock()
	n, taken := len(k.procs), k.procs[job.ID] != nil
	k.mu.Unlock()
	switch {
	case n >= sandbox.MaxBackground:
		return refuse("the session holds %d background processes, the most it may (kill one first)", n)
	case taken:
		return refuse("a background process %s is already held", job.ID)
	case len(job.Stdin) > 0 || job.Wall != 0:
		return refuse("a background job takes no stdin and no wall limit (open_stdin streams it)")
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
	stdin, stdinW, err0 := fds.input(job.OpenStdin)
	outR, outW, err1 := fds.pipe()
	errR, errW, err2 := fds.pipe()
	if err := errors.Join(err0, err1, err2); err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	env := job.Env
	if env == nil {
		env = []string{}
	}
	p := &bgProc{id: job.ID, argv: slices.Clone(job.Argv), drains: 2, stdin: -1,
		stdout: sandbox.Capped{Limit: job.Output}, stderr: sandbox.Capped{Limit: job.Output}}
	sys := &syscall.SysProcAttr{Setsid: true}
	if attr != nil {
		attr(sys)
	}
	var ferr error
	k.on(func() {
		p.started = time.Now()
		p.pid, ferr = syscall.ForkExec(prog, job.Argv, &syscall.ProcAttr{Dir: job.Dir, Env: env,
			Files: []uintptr{uintptr(stdin), uintptr(outW), uintptr(errW)}, Sys: sys})
	})
	if ferr != nil {
		rep.ExitCode, rep.Error = 127, fmt.Sprintf("fork/exec %s: %v", prog, ferr)
		return rep
	}
	if stdinW >= 0 {
		// Its own: no later child inherits it (close-on-exec), and a
		// write never blocks the agent's one job at a time.
		if err := syscall.SetNonblock(stdinW, true); err == nil {
			p.stdin = fds.release(stdinW)
		}
	}
	k.mu.Lock()
	k.procs[p.id] = p
	k.mu.Unlock()
	for i, r := range []int{outR, errR} {
		sink := &p.stdout
		if i == 1 {
			sink = &p.stderr
		}
		f, err := pollable(fds.release(r))
		if err != nil { // cannot happen for a pipe; the stream is read as ended
			k.drained(p)
			continue
		}
		go k.drain(p, f, sink)
	}
	rep.Pid = p.pid
	return rep
}

// pollable makes fd an *os.File read through the runtime's poller, so that
// a goroutine waiting on it holds no thread.
func pollable(fd int) (*os.File, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "bg"), nil
}

// drain reads one of p's streams to its end into sink.
func (k *keeper) drain(p *bgProc, f *os.File, sink *sandbox.Capped) {
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			k.mu.Lock()
			if !p.frozen {
				_, _ = sink.Write(buf[:n])
			}
			k.mu.Unlock()
		}
		if err != nil {
			k.drained(p)
			return
		}
	}
}

func (k *keeper) drained(p *bgProc) {
	k.mu.Lock()
	p.drains--
	k.mu.Unlock()
}

// siginfo codes of a child's event (CLD_* in <signal.h>).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
)

// sigchld is the part of a siginfo_t that waitid fills for a child
// (linux/amd64 and arm64 layout: the union starts at byte 16).
type sigchld struct {
	signo, errno, code, _ int32
	pid, uid, status      int32
	_                     [100]byte
}

// poll notes every held leader that has exited, without reaping it (see
// the package's note above), and detaches one that stopped for a tracer it
// chose (PTRACE_TRACEME). It runs on the keeper's thread.
func (k *keeper) poll() {
	k.mu.Lock()
	var todo []*bgProc
	for _, p := range k.procs {
		if p.exited.IsZero() {
			todo = append(todo, p)
		}
	}
	k.mu.Unlock()
	for _, p := range todo {
		var si sigchld
		err := unix.Waitid(unix.P_PID, p.pid, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != nil || si.pid == 0 {
			continue
		}
		switch si.code {
		case cldExited:
			k.exited(p, waitInfo{code: int(si.status)})
		case cldKilled, cldDumped:
			k.exited(p, waitInfo{signal: syscall.Signal(si.status)})
		case cldTrapped:
			detach(p.pid, syscall.Signal(si.status))
		}
	}
}

func (k *keeper) exited(p *bgProc, ws waitInfo) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p.exited.IsZero() {
		p.exited, p.ws = time.Now(), ws
	}
}

// view is p as reported, its output included if withOutput. A process
// whose leader has exited is reported ended once its output is read to the
// end, or waitDelay after the exit (a descendant holding the pipes), as a
// foreground job's; from then on its output is frozen. Call with k.mu.
func (p *bgProc) view(withOutput bool) sandbox.Process {
	if !p.frozen && !p.exited.IsZero() && (p.drains == 0 || time.Since(p.exited) >= waitDelay) {
		p.frozen, p.ended = true, p.exited
	}
	v := sandbox.Process{ID: p.id, Pid: p.pid, Argv: slices.Clone(p.argv), Started: p.started, Running: !p.frozen,
		Killed: p.killedUp, StdoutTruncated: p.stdout.Truncated, StderrTruncated: p.stderr.Truncated}
	if p.frozen {
		v.Ended, v.ExitCode = p.ended, p.ws.code
		if p.ws.signal != 0 {
			v.ExitCode, v.Signal = 128+int(p.ws.signal), p.ws.signal.String()
		}
	}
	if withOutput {
		v.Stdout, v.Stderr = slices.Clone(p.stdout.Bytes()), slices.Clone(p.stderr.Bytes())
	}
	return v
}

// procsJob answers a Procs job.
func (k *keeper) procsJob(job Job) Reply {
	rep := Reply{ID: job.ID}
	op := job.Procs
	if k.held() > 0 {
		k.on(k.poll) // exits whose SIGCHLD is still on its way
	}
	switch op.Op {
	case ProcsList:
		k.mu.Lock()
		for _, p := range k.procs {
			rep.Procs = append(rep.Procs, p.view(false))
		}
		k.mu.Unlock()
		slices.SortFunc(rep.Procs, func(a, b sandbox.Process) int { return a.Started.Compare(b.Started) })
		return rep
	case ProcsGet, ProcsKill, ProcsWrite:
	default:
		rep.Class, rep.Error = sandbox.BadInput, fmt.Sprintf("unknown procs operation %q", op.Op)
		return rep
	}
	k.mu.Lock()
	p := k.procs[op.ID]
	k.mu.Unlock()
	if p == nil {
		rep.Class, rep.Error = sandbox.NotFound, fmt.Sprintf("no background process %s", op.ID)
		return rep
	}
	switch op.Op {
	case ProcsKill:
		var err error
		k.on(func() { err = k.kill(p) })
		if err != nil {
			rep.Error = err.Error() // the host must not trust the sandbox again
			return rep
		}
	case ProcsWrite:
		n, err := k.write(p, op.Data, op.Close)
		rep.Written = n
		if err != nil {
			rep.Class, rep.Error = sandbox.Conflict, err.Error()
			return rep
		}
	}
	k.mu.Lock()
	rep.Procs = []sandbox.Process{p.view(true)}
	k.mu.Unlock()
	return rep
}

// kill ends p's session: SIGKILL to each of its processes, then each one
// reaped, its leader last-but-not-least (its status kept if it had
// exited on its own), until none is left; p is then forgotten. It runs on
// the keeper's thread and is bounded by sweepLimit.
func (k *keeper) kill(p *bgProc) error {
	k.mu.Lock()
	p.killedUp = p.exited.IsZero()
	k.mu.Unlock()
	deadline := time.Now().Add(sweepLimit)
	for {
		ps, err := scanProcs()
		if err != nil {
			return fmt.Errorf("kill %s: %w", p.id, err)
		}
		sid := make(map[int]int, len(ps))
		for _, q := range ps {
			sid[q.pid] = q.sid
		}
		left := 0
		for _, q := range ps {
			if q.sid != p.pid {
				continue
			}
			if !q.zombie() {
				left++
				_ = syscall.Kill(q.pid, syscall.SIGKILL)
				continue
			}
			if q.ppid != 1 && sid[q.ppid] != p.pid {
				continue // its parent left the session: the zombie is its parent's to reap
			}
			left++
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(q.pid, &ws, syscall.WNOHANG, nil); pid == p.pid {
				w := waitInfo{code: ws.ExitStatus()}
				if ws.Signaled() {
					w = waitInfo{signal: ws.Signal()}
				}
				k.exited(p, w)
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill %s: processes of its session still alive after %s", p.id, sweepLimit)
		}
		time.Sleep(200 * time.Microsecond)
	}
	// Its output: what it wrote before it died, read to the end (a
	// process outside its session may hold the pipes: waitDelay at most).
	for end := time.Now().Add(waitDelay); time.Now().Before(end); time.Sleep(time.Millisecond) {
		k.mu.Lock()
		d := p.drains
		k.mu.Unlock()
		if d == 0 {
			break
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if p.exited.IsZero() { // reaped by someone else: cannot happen while held
		p.exited, p.ws = time.Now(), waitInfo{signal: syscall.SIGKILL}
	}
	p.drains = 0
	if p.stdin >= 0 {
		syscall.Close(p.stdin)
		p.stdin = -1
	}
	delete(k.procs, p.id)
	return nil
}

// errStdinClosed says a process's stdin takes no more input.
var errStdinClosed = errors.New("its stdin is closed")

// write writes data to p's stdin as far as its pipe takes it now and
// returns how much it wrote; with end, once all of it is written, the
// pipe is closed (the process reads end of file). A process started
// without OpenStdin, or whose stdin is closed, or that stopped reading
// (EPIPE), takes nothing.
func (k *keeper) write(p *bgProc, data []byte, end bool) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p.stdin < 0 {
		return 0, fmt.Errorf("background process %s: %w", p.id, errStdinClosed)
	}
	n := 0
	for n < len(data) {
		m, err := syscall.Write(p.stdin, data[n:])
		if m > 0 {
			n += m
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return n, nil // full: the rest is the caller's to send again
		case err == syscall.EPIPE:
			syscall.Close(p.stdin)
			p.stdin = -1
			return n, fmt.Errorf("background process %s stopped reading: %w", p.id, errStdinClosed)
		case err != nil:
			return n, fmt.Errorf("write to %s: %w", p.id, err)
		}
	}
	if end {
		syscall.Close(p.stdin)
		p.stdin = -1
	}
	return n, nil
}
