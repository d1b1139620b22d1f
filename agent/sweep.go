package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sweepLimit bounds one sweep: past it the sandbox is not to be trusted.
const sweepLimit = 5 * time.Second

// sweep kills every process in the agent's pid namespace but the agent and
// reaps them. kill(-1) from a namespace's init signals every other member
// (never the init itself), whatever its process group or session, so a
// job's daemonised leftovers go too; orphans are re-parented to the init,
// which reaps them here. It loops until kill finds nobody (ESRCH): a
// process forked while the signal was being delivered is caught by the
// next round.
//
// It refuses to run anywhere but as pid 1: kill(-1) elsewhere signals
// every process the caller may, which on a host is everything.
func sweep() error {
	if os.Getpid() != 1 {
		return errors.New("sweep: the agent is not its pid namespace's init")
	}
	deadline := time.Now().Add(sweepLimit)
	for {
		err := syscall.Kill(-1, syscall.SIGKILL)
		reapAll()
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sweep: kill: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sweep: processes still alive after %s", sweepLimit)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// reapAll reaps every child that has exited, without waiting for others.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil && err != syscall.EINTR {
			return
		}
	}
}
