package wasm

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/internal/childproc"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// WorkerEnv marks a worker process; its value is the state dir, so that
// Reconcile can find workers orphaned by a crashed parent.
const WorkerEnv = "WOVYR_WASM_WORKER"

// workerGrace is how long past its wall deadline a worker may take to answer
// before it is killed and the job fails with backend-failure.
const workerGrace = 10 * time.Second

// workerInit is the first message to a worker: the engine to build. It
// shares the parent's on-disk module cache (same state dir, same code hash).
type workerInit struct {
	StateDir  string
	Engine    wasmcapi.EngineConfig
	EpochTick time.Duration
}

// workerJob is one invocation: the module, the spec the parent built (weak
// knobs already applied) and the descriptor bound.
type workerJob struct {
	Module []byte
	Spec   wasmcapi.Spec
	NoFile int
}

// workerReply answers workerInit (Outcome nil) and each workerJob.
type workerReply struct {
	Accepted bool // the worker has the job and is about to run it
	Outcome  *wasmcapi.Outcome
	Err      string
}

// worker is one long-lived worker process, running one job at a time.
type worker struct {
	cmd   *exec.Cmd
	child *childproc.Child
	in    io.Closer
	enc   *gob.Encoder
	dec   *gob.Decoder
}

// exited reports whether the worker process has ended: an idle worker
// killed from outside must not be handed a job.
func (w *worker) exited() bool {
	select {
	case <-w.child.Done():
		return true
	default:
		return false
	}
}

// kill ends the process and reaps it.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	_ = w.in.Close()
	_ = w.child.Wait()
}

// stop asks the process to exit (end of input), killing it if it lingers.
func (w *worker) stop() {
	_ = w.in.Close()
	t := time.AfterFunc(5*time.Second, func() { _ = w.cmd.Process.Kill() })
	_ = w.child.Wait()
	t.Stop()
}

// workers is the Backend's pool of worker processes. At most max run jobs
// at once; idle ones are kept for the next job.
type workers struct {
	argv  []string
	init  workerInit
	log   *slog.Logger
	slots chan struct{}

	mu     sync.Mutex
	idle   []*worker
	closed bool
}

func newWorkers(cfg Config) *workers {
	return &workers{
		argv:  cfg.Worker,
		init:  workerInit{StateDir: cfg.StateDir, Engine: cfg.Engine, EpochTick: cfg.EpochTick},
		log:   cfg.Logger,
		slots: make(chan struct{}, cfg.Workers),
	}
}

// spawn starts a worker. Its Pdeathsig follows the thread that forks it,
// which childproc holds for the worker's life.
func (p *workers) spawn() (*worker, error) {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+p.init.StateDir)
	// A worker dies with its parent: Pdeathsig, and end of input besides.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	child, err := childproc.Start(cmd)
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, child: child, in: in, enc: gob.NewEncoder(in), dec: gob.NewDecoder(out)}
	var r workerReply
	if err := w.enc.Encode(&p.init); err == nil {
		err = w.dec.Decode(&r)
	}
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	if err != nil {
		w.kill()
		return nil, fmt.Errorf("worker %s: %w", p.argv[0], err)
	}
	p.log.Debug("wasm: worker started", "pid", cmd.Process.Pid)
	return w, nil
}

// get returns an idle worker (reused true) or a new one.
func (p *workers) get() (w *worker, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, true, nil
	}
	p.mu.Unlock()
	w, err = p.spawn()
	return w, false, err
}

func (p *workers) put(w *worker) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, w)
		w = nil
	}
	p.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// run runs one job on a worker. Cancellation kills the worker (class
// killed, as in-process); a worker that dies or hangs fails the job with
// backend-failure and is replaced by the next job.
func (p *workers) run(ctx context.Context, job *workerJob) (*wasmcapi.Outcome, error) {
	cancelled := &wasmcapi.Outcome{End: wasmcapi.EndCancelled, TrapCode: -1}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return cancelled, nil
	}
	defer func() { <-p.slots }()
	var w *worker
	for {
		nw, reused, err := p.get()
		if err != nil {
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: start worker")
		}
		// An idle worker that died never sees the job; take another.
		if reused && nw.exited() {
			nw.kill()
			p.log.Warn("wasm: idle worker was gone", "pid", nw.cmd.Process.Pid)
			continue
		}
		var ack workerReply
		err = nw.enc.Encode(job)
		if err == nil {
			err = nw.dec.Decode(&ack)
		}
		if err != nil || !ack.Accepted {
			nw.kill()
			if reused {
				// It died while idle: the job never ran.
				p.log.Warn("wasm: idle worker was gone", "pid", nw.cmd.Process.Pid, "err", err)
				continue
			}
			return nil, sandbox.Wrap(sandbox.BackendFailure, err, "wasm: send job to worker %d", nw.cmd.Process.Pid)
		}
		w = nw
		break
	}
	type answer struct {
		r   workerReply
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		var a answer
		a.err = w.dec.Decode(&a.r)
		ch <- a
	}()
	var late <-chan time.Time
	if job.Spec.Wall > 0 {
		t := time.NewTimer(job.Spec.Wall + workerGrace)
		defer t.Stop()
		late = t.C
	}
	select {
	case a := <-ch:
		if a.err != nil {
			w.kill()
			return nil, sandbox.Wrap(sandbox.BackendFailure, a.err, "wasm: worker %d died mid-job", w.cmd.Process.Pid)
		}
		p.put(w)
		if a.r.Err != "" || a.r.Outcome == nil {
			return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm worker: %s", a.r.Err)
		}
		return a.r.Outcome, nil
	case <-ctx.Done():
		w.kill()
		<-ch
		return cancelled, nil
	case <-late:
		w.kill()
		<-ch
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm worker %d did not answer within %s of its deadline", w.cmd.Process.Pid, workerGrace)
	}
}

// close stops the idle workers; the Backend's life lock guarantees no job
// is running.
func (p *workers) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, w := range idle {
		w.stop()
	}
}
