package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// The host's judgement of an agent's answers to a session's jobs, shared by
// every backend whose sandboxes run this agent (a container's, gVisor's, a
// microVM's guest). An agent shares its sandbox with the tenant's code, so
// an answer is believed only within the bounds the job set; one beyond
// them is an ErrAgentFault, after which the host must not trust the
// sandbox with another job.

// ErrAgentFault marks an answer beyond the bounds of its job.
var ErrAgentFault = errors.New("agent: answer out of bounds")

func fault(format string, a ...any) error {
	return &sandbox.Error{Class: sandbox.BackendFailure, Msg: fmt.Sprintf(format, a...), Err: ErrAgentFault}
}

// FileResult judges rep, the answer to a File job for op: its error in the
// class it names (not-found or bad-input, nothing else is believed), its
// data no larger than op asked for.
func FileResult(op *sandbox.FileOp, rep Reply) (*sandbox.FileReply, error) {
	if rep.Error != "" {
		c := sandbox.BadInput
		if rep.FileClass == sandbox.NotFound {
			c = sandbox.NotFound
		}
		return nil, &sandbox.Error{Class: c, Field: "path", Msg: rep.Error}
	}
	fr := rep.File
	max := op.Max
	if max == 0 {
		max = sandbox.MaxFileBytes
	}
	switch {
	case fr == nil:
		return nil, fault("the sandbox's agent answered a file %s without a result", op.Op)
	case int64(len(fr.Data)) > max || len(fr.Entries) > MaxListEntries:
		return nil, fault("the sandbox's agent answered a file %s with more than was asked for", op.Op)
	}
	return fr, nil
}

// StartResult judges rep, the answer to the Background job that started e
// (validated, with its id and output cap) at started.
func StartResult(e sandbox.Exec, rep Reply, started time.Time) (*sandbox.Process, error) {
	switch {
	case rep.Error != "" && rep.Class == sandbox.BadInput:
		return nil, &sandbox.Error{Class: sandbox.BadInput, Field: "background", Msg: rep.Error}
	case rep.Error != "":
		// Not started (command not found): reported as a foreground
		// exec's, ended at once and not held.
		stderr, cut := sandbox.AppendNotStarted(nil, rep.Error, e.Output)
		return &sandbox.Process{ID: e.ID, Argv: e.Argv, Started: started, Ended: time.Now(), ExitCode: 127,
			Stderr: stderr, StderrTruncated: cut}, nil
	case rep.Pid <= 0:
		return nil, fault("the sandbox's agent started %s without a pid", e.ID)
	}
	return &sandbox.Process{ID: e.ID, Pid: rep.Pid, Argv: e.Argv, Started: started, Running: true}, nil
}

// ProcsResult judges rep, the answer to the Procs job op: at most
// sandbox.MaxBackground processes, exactly one for get and kill (one
// set), each one's output within the session's cap output. An id the
// agent does not hold is NotFound. An error the agent could not type
// (a kill that failed) is a fault too: processes may be left.
func ProcsResult(op ProcsJob, rep Reply, one bool, output int64) ([]sandbox.Process, error) {
	if rep.Error != "" {
		switch rep.Class {
		case sandbox.NotFound:
			return nil, sandbox.Errorf(sandbox.NotFound, "process", "no background process %s in this session", op.ID)
		case sandbox.BadInput:
			return nil, &sandbox.Error{Class: sandbox.BadInput, Field: "process", Msg: rep.Error}
		}
		return nil, fault("background %s %s: the sandbox may hold leftover processes: %s", op.Op, op.ID, rep.Error)
	}
	bad := len(rep.Procs) > sandbox.MaxBackground || one && (len(rep.Procs) != 1 || rep.Procs[0].ID != op.ID)
	for _, p := range rep.Procs {
		bad = bad || sandbox.CheckReplyOutput("the sandbox's agent", p.Stdout, p.Stderr, output) != nil
	}
	if bad {
		return nil, fault("the sandbox's agent answered a background %s out of bounds", op.Op)
	}
	return rep.Procs, nil
}

// WriteResult judges rep, the answer to a Procs write of n bytes to id's
// stdin.
func WriteResult(id string, n int, rep Reply) (int, error) {
	switch {
	case rep.Written < 0 || rep.Written > n:
		return 0, fault("the sandbox's agent answered a stdin write of %d bytes with %d", n, rep.Written)
	case rep.Error == "":
		return rep.Written, nil
	case rep.Class == sandbox.NotFound:
		return 0, sandbox.Errorf(sandbox.NotFound, "process", "no background process %s in this session", id)
	case rep.Class == sandbox.Conflict:
		return rep.Written, &sandbox.Error{Class: sandbox.Conflict, Field: "process", Msg: rep.Error}
	}
	return 0, fault("stdin write to %s: %s", id, rep.Error)
}

// ProcsCall is a backend's round trip of one Procs job, judged
// (ProcsResult); its methods are sandbox.Processes' list, get and kill.
type ProcsCall func(ctx context.Context, op ProcsJob, one bool) ([]sandbox.Process, error)

// List is sandbox.Processes.Processes: never nil.
func (call ProcsCall) List(ctx context.Context) ([]sandbox.Process, error) {
	ps, err := call(ctx, ProcsJob{Op: ProcsList}, false)
	if ps == nil && err == nil {
		ps = []sandbox.Process{}
	}
	return ps, err
}

// Get is sandbox.Processes.Process.
func (call ProcsCall) Get(ctx context.Context, id string) (*sandbox.Process, error) {
	return call.one(ctx, ProcsJob{Op: ProcsGet, ID: id})
}

// Kill is sandbox.Processes.Kill.
func (call ProcsCall) Kill(ctx context.Context, id string) (*sandbox.Process, error) {
	return call.one(ctx, ProcsJob{Op: ProcsKill, ID: id})
}

func (call ProcsCall) one(ctx context.Context, op ProcsJob) (*sandbox.Process, error) {
	ps, err := call(ctx, op, true)
	if err != nil {
		return nil, err
	}
	return &ps[0], nil
}
