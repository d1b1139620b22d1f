//go:build linux && amd64

package prober

import (
	"bufio"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// dangerous are the syscalls the sweep (row 39) must see refused (EPERM or
// ENOSYS) with all-zero arguments: namespaces, mounts, modules, keys, bpf,
// perf, io_uring, userfaultfd, clocks, boot, handles, tracing.
var dangerous = map[string]uintptr{
	"syslog": unix.SYS_SYSLOG, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
	"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT, "sethostname": unix.SYS_SETHOSTNAME,
	"setdomainname": unix.SYS_SETDOMAINNAME, "iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM, "init_module": unix.SYS_INIT_MODULE,
	"delete_module": unix.SYS_DELETE_MODULE, "quotactl": unix.SYS_QUOTACTL, "acct": unix.SYS_ACCT, "settimeofday": unix.SYS_SETTIMEOFDAY,
	"pivot_root": unix.SYS_PIVOT_ROOT, "adjtimex": unix.SYS_ADJTIMEX, "clock_settime": unix.SYS_CLOCK_SETTIME,
	"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
	"add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY, "keyctl": unix.SYS_KEYCTL, "unshare": unix.SYS_UNSHARE,
	"setns": unix.SYS_SETNS, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"finit_module": unix.SYS_FINIT_MODULE, "bpf": unix.SYS_BPF, "userfaultfd": unix.SYS_USERFAULTFD,
	"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
	"open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT, "fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG,
	"fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK, "mount_setattr": unix.SYS_MOUNT_SETATTR,
	"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "kcmp": unix.SYS_KCMP,
	"lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "vhangup": unix.SYS_VHANGUP,
}

// sweepSkip are numbers the sweep does not call: they end, fork or block
// the child by design.
var sweepSkip = map[uintptr]bool{unix.SYS_RT_SIGRETURN: true, unix.SYS_PAUSE: true, unix.SYS_CLONE: true,
	unix.SYS_FORK: true, unix.SYS_VFORK: true, unix.SYS_EXIT: true, unix.SYS_EXIT_GROUP: true, unix.SYS_SECCOMP: true,
	unix.SYS_PTRACE: true /* TRACEME would stop the child at its next signal */}

const sweepMax = 470

// sweep (row 39) calls every syscall number 0..sweepMax with all-zero
// arguments in child processes, starting a new child past a number that
// killed or hung the last one (timeout args[0] ms). Data: how many reached
// the kernel (neither ENOSYS nor EPERM), how many were ENOSYS, EPERM or
// lost (killed or hung), and the result of every dangerous syscall.
func sweep(args []string) Report {
	timeout := time.Duration(intArg(args, 0, 300)) * time.Millisecond
	results := map[uintptr]string{}
	for next := uintptr(0); next <= sweepMax; {
		cmd := exec.Command("/proc/self/exe", "probe", "sweepchild", strconv.Itoa(int(next)))
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			return Report{Errno: errOf(err)}
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
	child:
		for next <= sweepMax {
			select {
			case l, ok := <-lines:
				if !ok {
					results[next] = "lost"
					next++
					break child
				}
				var nr uintptr
				var r string
				fmt.Sscan(l, &nr, &r)
				results[nr] = r
				next = nr + 1
			case <-time.After(timeout):
				results[next] = "lost"
				next++
				break child
			}
		}
		cmd.Process.Kill()
		go func() {
			for range lines {
			}
		}()
		cmd.Wait()
	}
	d := map[string]string{}
	var reached, enosys, eperm, lost int
	for nr := uintptr(0); nr <= sweepMax; nr++ {
		switch r := results[nr]; {
		case sweepSkip[nr]:
		case r == "ENOSYS":
			enosys++
		case r == "EPERM":
			eperm++
		case r == "lost":
			lost++
		default:
			reached++
		}
	}
	for name, nr := range dangerous {
		d[name] = results[nr]
	}
	d["reached"], d["enosys"], d["eperm"], d["lost"] = strconv.Itoa(reached), strconv.Itoa(enosys), strconv.Itoa(eperm), strconv.Itoa(lost)
	return Report{Count: len(results), Data: d}
}

// sweepChild calls numbers from args[0] on, printing "nr result" after each.
func sweepChild(args []string) Report {
	for nr := uintptr(intArg(args, 0, 0)); nr <= sweepMax; nr++ {
		r := "skipped"
		if !sweepSkip[nr] {
			_, _, e := unix.RawSyscall6(nr, 0, 0, 0, 0, 0, 0)
			r = res(e)
		}
		unix.Write(1, []byte(fmt.Sprintf("%d %s\n", nr, r)))
	}
	unix.Exit(0)
	return Report{}
}
