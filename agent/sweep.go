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
// While background processes are held (background.go) it spares their
// sessions instead (sweepSparing).
//
// It refuses to run anywhere but as pid 1: kill(-1) elsewhere signals
// every process the caller may, which on a host is everything.
func sweep() error {
	if os.Getpid() != 1 {
		return errors.New("sweep: the agent is not its pid namespace's init")
	}
	if spare := bg.sessions(); len(spare) > 0 {
		return sweepSparing(spare)
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

// sweepSparing is the sweep while background processes are held: every
// process in the namespace but the agent and the members of the sessions
// in spare is killed, one by one, and reaped, until a scan of /proc finds
// none left. A foreground job cannot hide in a spared session: a process
// joins a session only by being born in it or by making a new one of its
// own pid (setsid), and setpgid cannot move a process into a group of
// another session; a spared session's id stays its held leader's, whose
// zombie keeps the pid from being reused (background.go).
func sweepSparing(spare map[int]bool) error { return sweepWith(scanProcs, spare) }

// sweepWith is sweepSparing over the processes scan lists.
func sweepWith(scan func() ([]procStat, error), spare map[int]bool) error {
	deadline := time.Now().Add(sweepLimit)
	for {
		ps, err := scan()
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		alive := 0
		for _, p := range ps {
			switch {
			case p.pid == 1 || spare[p.sid]:
			case p.zombie():
				// Ours once its parent is gone (then it is the init's);
				// before that, its parent's, which this round kills.
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
			default:
				alive++
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		if alive == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sweep: processes still alive after %s", sweepLimit)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
