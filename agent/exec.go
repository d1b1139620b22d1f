package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// defaultPath is used to find argv[0] when the job's env has no PATH.
const defaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

// Execute runs one job to completion inside the sandbox and never panics on
// bad input: a job that cannot start yields a Reply with Error set.
func Execute(ctx context.Context, job Job) Reply { return execute(ctx, job, nil) }

// execute is Execute; attr, if set, adds to the child's SysProcAttr (the
// microVM's agent starts the job inside its cgroup).
func execute(ctx context.Context, job Job, attr func(*syscall.SysProcAttr)) Reply {
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
	cmd := exec.Command(prog)
	cmd.Args = job.Argv
	cmd.Env = append([]string{}, job.Env...) // non-nil: nothing inherited
	cmd.Dir = job.Dir
	cmd.Stdin = strings.NewReader(string(job.Stdin))
	stdout, stderr := &sandbox.Capped{Limit: job.Output}, &sandbox.Capped{Limit: job.Output}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group so a deadline kills the whole tree, not the leader.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if attr != nil {
		attr(cmd.SysProcAttr)
	}
	cmd.WaitDelay = 100 * time.Millisecond // grandchildren holding the pipes

	start := time.Now()
	if err := cmd.Start(); err != nil {
		rep.ExitCode, rep.Error = 127, err.Error()
		return rep
	}
	var deadline <-chan time.Time
	if job.Wall > 0 {
		t := time.NewTimer(job.Wall)
		defer t.Stop()
		deadline = t.C
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-deadline:
		rep.TimedOut = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	// Whatever the leader did, nothing of the job outlives it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	rep.Wall = time.Since(start)
	fillStatus(&rep, cmd.ProcessState, err)
	rep.Stdout, rep.StdoutTruncated = stdout.Bytes(), stdout.Truncated
	rep.Stderr, rep.StderrTruncated = stderr.Bytes(), stderr.Truncated
	return rep
}

func fillStatus(rep *Reply, ps *os.ProcessState, waitErr error) {
	if ps == nil {
		rep.ExitCode, rep.Error = 127, fmt.Sprint(waitErr)
		return
	}
	rep.CPU = ps.UserTime() + ps.SystemTime()
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		rep.MaxRSS = ru.Maxrss * 1024
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		rep.Signal = ws.Signal().String()
		rep.ExitCode = 128 + int(ws.Signal())
	default:
		rep.ExitCode = ps.ExitCode()
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		rep.Error = waitErr.Error()
	}
}

// LookPath resolves argv0 against the PATH in env (not the agent's own).
func LookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	p := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	for _, dir := range filepath.SplitList(p) {
		if dir == "" {
			continue
		}
		f := filepath.Join(dir, argv0)
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return f, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", argv0)
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
		if err := root.WriteFile(f.Path, f.Data, mode); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	return nil
}
