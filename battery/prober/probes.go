package prober

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func unwrapErrno(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.EAGAIN:
			return "EAGAIN"
		case syscall.ENOSPC:
			return "ENOSPC"
		case syscall.EMFILE:
			return "EMFILE"
		case syscall.ENOMEM:
			return "ENOMEM"
		case syscall.EFBIG:
			return "EFBIG"
		case syscall.EPERM:
			return "EPERM"
		case syscall.EACCES:
			return "EACCES"
		case syscall.ENETUNREACH:
			return "ENETUNREACH"
		case syscall.ECONNREFUSED:
			return "ECONNREFUSED"
		case syscall.ESRCH:
			return "ESRCH"
		case syscall.ENOENT:
			return "ENOENT"
		}
		return fmt.Sprintf("errno(%d)", int(en))
	}
	return err.Error()
}

// forkBomb starts sleeping children until a fork fails or cap is reached.
// args: cap.
func forkBomb(args []string) Report {
	limit := intArg(args, 0, 2000)
	var procs []*os.Process
	rep := Report{}
	for len(procs) < limit {
		p, err := startSleeper()
		if err != nil {
			rep.Errno = errnoName(err)
			break
		}
		procs = append(procs, p)
	}
	rep.Count = len(procs)
	for _, p := range procs {
		p.Kill()
		p.Wait()
	}
	return rep
}

// startSleeper starts a cheap child: /bin/sleep where the root has one,
// else another copy of this binary sleeping.
func startSleeper() (*os.Process, error) {
	if _, err := os.Stat("/bin/sleep"); err == nil {
		return os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
	}
	return os.StartProcess("/proc/self/exe", []string{"wovyr-guest", "probe", "sleep", "30000"}, &os.ProcAttr{})
}

// memHog allocates and touches 1 MiB chunks up to cap MiB. Under a memory
// limit the kernel kills it (the host sees the OOM kill); otherwise it
// reports how far it got.
func memHog(args []string) Report {
	limit := intArg(args, 0, 512)
	var keep [][]byte
	for i := 0; i < limit; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	return Report{Count: len(keep)}
}

// diskFill writes 1 MiB blocks to a file in the working directory until a
// write fails or cap MiB are written.
func diskFill(args []string) Report {
	limit := intArg(args, 0, 256)
	f, err := os.Create("fill")
	if err != nil {
		return Report{Errno: errnoName(err)}
	}
	defer os.Remove("fill")
	defer f.Close()
	block := make([]byte, 1<<20)
	rep := Report{}
	for rep.Count < limit {
		if _, err := f.Write(block); err != nil {
			rep.Errno = errnoName(err)
			break
		}
		rep.Count++
	}
	return rep
}

// inodes creates empty files until creation fails or cap is reached.
func inodes(args []string) Report {
	limit := intArg(args, 0, 100000)
	if err := os.Mkdir("inodes", 0o700); err != nil {
		return Report{Errno: errnoName(err)}
	}
	defer os.RemoveAll("inodes")
	rep := Report{}
	for rep.Count < limit {
		f, err := os.Create(fmt.Sprintf("inodes/%d", rep.Count))
		if err != nil {
			rep.Errno = errnoName(err)
			break
		}
		f.Close()
		rep.Count++
	}
	return rep
}

// fds opens /dev/null until open fails or cap is reached.
func fds(args []string) Report {
	limit := intArg(args, 0, 5000)
	var open []*os.File
	rep := Report{}
	for len(open) < limit {
		f, err := os.Open("/dev/null")
		if err != nil {
			rep.Errno = errnoName(err)
			break
		}
		open = append(open, f)
	}
	rep.Count = len(open)
	for _, f := range open {
		f.Close()
	}
	return rep
}

// spin burns CPU on every core for ms milliseconds, then reports.
func spin(args []string) Report {
	d := time.Duration(intArg(args, 0, 3000)) * time.Millisecond
	done := make(chan struct{})
	for i := 0; i < runtime.NumCPU(); i++ {
		go func() {
			x := 0
			for {
				select {
				case <-done:
					return
				default:
					x++
				}
			}
		}()
	}
	time.Sleep(d)
	close(done)
	return Report{Count: int(d / time.Millisecond)}
}

// flood writes MiB mebibytes to stdout before its report.
func flood(args []string) Report {
	n := intArg(args, 0, 64)
	block := []byte(strings.Repeat("x", 1<<20))
	for i := 0; i < n; i++ {
		os.Stdout.Write(block)
	}
	os.Stdout.Write([]byte("\n"))
	return Report{Count: n}
}

// daemon double-forks a detached sleeper carrying marker in its argv, so
// the host can look for it after teardown.
func daemon(args []string) Report {
	marker := strArg(args, 0, "wovyr-orphan")
	cmd := exec.Command("/proc/self/exe", "probe", "sleep", "600000", marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Report{Errno: errnoName(err)}
	}
	// Do not wait: the sleeper outlives us unless the sandbox reaps it.
	return Report{Count: cmd.Process.Pid, Data: map[string]string{"marker": marker}}
}

// connect dials each address in args with a short timeout: host:port over
// TCP, or @name, an abstract unix socket. Count is how many answered; Errno
// is the first refusal.
func connect(args []string) Report {
	if len(args) == 0 {
		args = []string{"127.0.0.1:1"}
	}
	rep := Report{Data: map[string]string{"addr": strings.Join(args, " ")}}
	for _, addr := range args {
		network := "tcp"
		if strings.HasPrefix(addr, "@") {
			network = "unix"
		}
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			if rep.Errno == "" {
				rep.Errno = errnoName(err)
			}
			continue
		}
		c.Close()
		rep.Count++
	}
	return rep
}

// self reports the process's credentials and environment as the kernel
// shows them.
func self(args []string) Report {
	d := map[string]string{"env": strings.Join(os.Environ(), "\x00")}
	st, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k {
		case "Uid", "Gid", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp":
			if ok {
				d[k] = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	lim, _ := os.ReadFile("/proc/self/limits")
	for _, line := range strings.Split(string(lim), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		switch {
		case strings.HasPrefix(line, "Max open files"):
			d["nofile"] = f[3]
		case strings.HasPrefix(line, "Max file size"):
			d["fsize"] = f[3]
		case strings.HasPrefix(line, "Max core file size"):
			d["core"] = f[4]
		}
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	d["cgroup"] = strings.TrimSpace(string(cg))
	wd, _ := os.Getwd()
	d["cwd"] = wd
	d["passwd_home"] = passwdHome(os.Getuid())
	return Report{Data: d}
}

// passwdHome is uid's home directory in the sandbox's own /etc/passwd, ""
// if it has none.
func passwdHome(uid int) string {
	b, _ := os.ReadFile("/etc/passwd")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) >= 6 && f[2] == strconv.Itoa(uid) {
			return f[5]
		}
	}
	return ""
}

// readFile tries to read args[0].
func readFile(args []string) Report {
	b, err := os.ReadFile(strArg(args, 0, ""))
	if err != nil {
		return Report{Errno: errnoName(err)}
	}
	return Report{Count: len(b), Data: map[string]string{"content": string(b)}}
}

// findMarked returns the pids (other than ours) whose argv contains marker.
func findMarked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) && !strings.Contains(string(b), "probe\x00kill") && !strings.Contains(string(b), "probe\x00peek") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killPid sends SIGKILL to every process carrying marker (args[0]) in its
// argv and counts the kills that succeeded.
func killPid(args []string) Report {
	rep := Report{}
	pids := findMarked(strArg(args, 0, "wovyr-target"))
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			rep.Errno = errnoName(err)
		} else {
			rep.Count++
		}
	}
	rep.Data = map[string]string{"seen": strconv.Itoa(len(pids))}
	return rep
}

// canary writes a file "canary" holding marker in the working directory,
// then sleeps ms (args[1]) with marker in its argv.
func canary(args []string) Report {
	marker := strArg(args, 0, "wovyr-canary")
	if err := os.WriteFile("canary", []byte(marker), 0o600); err != nil {
		return Report{Errno: errnoName(err)}
	}
	time.Sleep(time.Duration(intArg(args, 1, 5000)) * time.Millisecond)
	return Report{Count: 1}
}

// peek finds the process carrying marker and tries to read the canary in
// its working directory through /proc.
func peek(args []string) Report {
	marker := strArg(args, 0, "wovyr-canary")
	rep := Report{}
	for _, pid := range findMarked(marker) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/canary", pid))
		if err != nil {
			rep.Errno = errnoName(err)
			continue
		}
		if string(b) == marker {
			rep.Count++
		}
	}
	return rep
}

// listen accepts connections for ms (args[1]) on TCP 127.0.0.1:port
// (args[0]) and, given a name (args[2]), on the abstract unix socket @name,
// and counts them. Both are scoped by the network namespace, so a tenant
// that reaches either shares one with its neighbour.
func listen(args []string) Report {
	addrs := [][2]string{{"tcp", "127.0.0.1:" + strArg(args, 0, "47047")}}
	if name := strArg(args, 2, ""); name != "" {
		addrs = append(addrs, [2]string{"unix", "@" + name})
	}
	var n atomic.Int64
	for _, a := range addrs {
		l, err := net.Listen(a[0], a[1])
		if err != nil {
			return Report{Errno: errnoName(err), Data: map[string]string{"addr": a[1]}}
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}()
	}
	time.Sleep(time.Duration(intArg(args, 1, 3000)) * time.Millisecond)
	return Report{Count: int(n.Load())}
}

// sleep sleeps ms milliseconds (a cheap child for other probes).
func sleep(args []string) Report {
	time.Sleep(time.Duration(intArg(args, 0, 1000)) * time.Millisecond)
	return Report{}
}
