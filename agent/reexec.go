package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A gVisor clone (backend/oci, ADR 0020) resumes the golden's agent
// mid-read: the same Go runtime, with the same PRNG state (math/rand, map
// seeds, the scheduler's), in every clone of one checkpoint. The Sentry's
// getrandom draws from the host on each call, so /dev/urandom already
// differs per clone, but state a process seeded before the checkpoint
// does not. The agent has no capability to reseed anything and keeps no
// state a job needs, so it starts over: it execs its own binary, which
// seeds a new runtime from the Sentry's fresh randomness, and the new
// process answers the Reexec job (Resume). Nothing runs in between: the
// job stream's next frame waits in the pipe.

// ThawedFlag is the agent's command-line flag, set by reexec, naming the
// Reexec job the new process answers.
const ThawedFlag = "thawed"

// Thawed is a re-executed agent's answer to a Reexec job.
type Thawed struct {
	PID   int       `json:"pid"`
	Clock time.Time `json:"clock"` // its wall clock as it answered: the host checks it
	// Rand is a draw from the new runtime's own PRNG (math/rand/v2): the
	// host checks that clones of one golden differ.
	Rand uint64 `json:"rand"`
}

// reexec replaces the agent with a fresh start of its own binary, which
// answers job id. It returns only if the exec failed.
func reexec(id string) error {
	argv := []string{os.Args[0], os.Args[1], "--" + ThawedFlag + "=" + id}
	// By its own path where it can be read, so that the new process's
	// name (comm) is the golden's agent's, not "exe": a clone's process
	// set is the golden's (battery row 90).
	path, err := os.Readlink("/proc/self/exe")
	if err != nil {
		path = "/proc/self/exe"
	}
	err = unix.Exec(path, argv, os.Environ())
	return fmt.Errorf("agent: re-exec after restore: %w", err)
}

// Resume answers the Reexec job id that started this agent, then serves
// rw like Serve.
func Resume(ctx context.Context, rw io.ReadWriter, id string) error {
	t := &Thawed{PID: os.Getpid(), Clock: time.Now(), Rand: rand.Uint64()}
	if err := WriteFrame(rw, Reply{ID: id, Thawed: t}); err != nil {
		return err
	}
	return Serve(ctx, rw)
}
