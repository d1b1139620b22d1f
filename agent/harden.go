package agent

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Harden makes the calling agent process non-dumpable. A workload runs as
// the same uid as the agent inside its sandbox; without this it could open
// /proc/<agent>/fd/* — read the job stream, forge reply frames, or write
// into whatever file the agent's stderr is — or ptrace the agent. Children
// become dumpable again at execve, which is what a workload expects.
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("agent: prctl(PR_SET_DUMPABLE): %w", err)
	}
	return nil
}
