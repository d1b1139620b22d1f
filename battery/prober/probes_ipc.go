package prober

import (
	"errors"
	"hash/fnv"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ipcKey is the SysV key both tenants derive from a marker.
func ipcKey(marker string) int {
	h := fnv.New32a()
	h.Write([]byte(marker))
	return int(h.Sum32() & 0x3fffffff)
}

func mqOpen(name string, flags int) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	attr := [8]int64{0, 4, 64} // flags, maxmsg, msgsize
	fd, _, en := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(p)), uintptr(flags), 0o666, uintptr(unsafe.Pointer(&attr)), 0, 0)
	if en != 0 {
		return -1, en
	}
	return int(fd), nil
}

func mqUnlink(name string) {
	if p, err := unix.BytePtrFromString(name); err == nil {
		unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	}
}

func sysvGet(nr uintptr, key int, a2, a3 int) error {
	_, _, en := unix.Syscall(nr, uintptr(key), uintptr(a2), uintptr(a3))
	if en != 0 {
		return en
	}
	return nil
}

// ipcPut creates, under the key and names marker (args[0]) derives, a
// SysV shared memory segment, message queue and semaphore set, a file in
// /dev/shm and a POSIX message queue; writes "ready" in the working
// directory; holds them ms (args[1]); then removes them all.
func ipcPut(args []string) Report {
	marker := strArg(args, 0, "wovyr-ipc")
	key := ipcKey(marker)
	rep := Report{Data: map[string]string{}}
	note := func(kind string, err error) {
		if err != nil {
			rep.Data[kind] = errnoName(err)
		} else {
			rep.Count++
		}
	}
	shm, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o666)
	note("shm", err)
	note("msg", sysvGet(unix.SYS_MSGGET, key, unix.IPC_CREAT|unix.IPC_EXCL|0o666, 0))
	note("sem", sysvGet(unix.SYS_SEMGET, key, 1, unix.IPC_CREAT|unix.IPC_EXCL|0o666))
	note("devshm", os.WriteFile("/dev/shm/"+marker, []byte(marker), 0o666))
	mq, err := mqOpen(marker, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR)
	note("mqueue", err)
	_ = os.WriteFile("ready", nil, 0o644)
	time.Sleep(time.Duration(intArg(args, 1, 3000)) * time.Millisecond)
	if shm >= 0 && err == nil {
		unix.SysvShmCtl(shm, unix.IPC_RMID, nil)
	}
	if id, _, en := unix.Syscall(unix.SYS_MSGGET, uintptr(key), 0, 0); en == 0 {
		unix.Syscall(unix.SYS_MSGCTL, id, unix.IPC_RMID, 0)
	}
	if id, _, en := unix.Syscall(unix.SYS_SEMGET, uintptr(key), 0, 0); en == 0 {
		unix.Syscall6(unix.SYS_SEMCTL, id, 0, unix.IPC_RMID, 0, 0, 0)
	}
	os.Remove("/dev/shm/" + marker)
	if mq >= 0 {
		unix.Close(mq)
	}
	mqUnlink(marker)
	return rep
}

// ipcGet counts which of ipcPut's objects for marker (args[0]) it can see:
// any answer but ENOENT means the object is visible.
func ipcGet(args []string) Report {
	marker := strArg(args, 0, "wovyr-ipc")
	key := ipcKey(marker)
	rep := Report{Data: map[string]string{}}
	note := func(kind string, err error) {
		if err == nil || !errors.Is(err, unix.ENOENT) {
			rep.Count++
			rep.Data[kind] = "visible " + errnoName(err)
		}
	}
	_, err := unix.SysvShmGet(key, 0, 0)
	note("shm", err)
	note("msg", sysvGet(unix.SYS_MSGGET, key, 0, 0))
	note("sem", sysvGet(unix.SYS_SEMGET, key, 0, 0))
	_, err = os.Stat("/dev/shm/" + marker)
	note("devshm", err)
	fd, err := mqOpen(marker, unix.O_RDONLY)
	if err == nil {
		unix.Close(fd)
	}
	note("mqueue", err)
	return rep
}

// kgrow creates pipes, inotify instances and POSIX message queues, each
// kind until creation fails or cap (args[0]) is reached (releasing them
// before the next kind), and reports how many of each and what stopped
// them. With ms (args[1]) > 0 it then takes all it can of every kind at
// once, writes "ready" in the working directory and holds them ms, so a
// neighbour can be measured meanwhile.
func kgrow(args []string) Report {
	limit := intArg(args, 0, 2000)
	rep := Report{Data: map[string]string{}}
	// The Go runtime's poller and the "ready" file need fds of their own:
	// take them before the budget is spent.
	if r, w, err := os.Pipe(); err == nil {
		defer r.Close()
		defer w.Close()
	}
	if f, err := os.Create("ready.tmp"); err == nil {
		f.Close()
	}
	var fds []int
	grow := func(kind string, mk func(i int) ([]int, error)) {
		n := 0
		for n < limit {
			got, err := mk(n)
			if err != nil {
				rep.Data[kind+"_errno"] = errnoName(err)
				break
			}
			fds = append(fds, got...)
			n++
		}
		rep.Data[kind] = strconv.Itoa(n)
		rep.Count += n
		// Release them: each kind is measured against the whole budget.
		for _, fd := range fds {
			unix.Close(fd)
		}
		fds = fds[:0]
	}
	grow("pipes", func(int) ([]int, error) {
		p := make([]int, 2)
		return p, unix.Pipe2(p, unix.O_CLOEXEC)
	})
	grow("inotify", func(int) ([]int, error) {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		return []int{fd}, err
	})
	pid := strconv.Itoa(os.Getpid())
	grow("mqueue", func(i int) ([]int, error) {
		name := "wovyr-kgrow-" + pid + "-" + strconv.Itoa(i)
		fd, err := mqOpen(name, unix.O_CREAT|unix.O_RDWR)
		mqUnlink(name) // the queue lives while fd is open
		return []int{fd}, err
	})
	hold := time.Duration(intArg(args, 1, 0)) * time.Millisecond
	if hold <= 0 {
		return rep
	}
	for i := 0; i < limit; i++ {
		p := make([]int, 2)
		if unix.Pipe2(p, unix.O_CLOEXEC) != nil {
			break
		}
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			break
		}
		name := "wovyr-kgrow-" + pid + "-h" + strconv.Itoa(i)
		mq, err := mqOpen(name, unix.O_CREAT|unix.O_RDWR)
		mqUnlink(name)
		if err != nil {
			break
		}
		fds = append(fds, p[0], p[1], fd, mq)
	}
	rep.Data["held"] = strconv.Itoa(len(fds))
	_ = unix.Rename("ready.tmp", "ready")
	time.Sleep(hold)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return rep
}

// threads starts OS threads, each locked and parked, until cap (args[0]).
// When the kernel refuses a thread the Go runtime aborts with "failed to
// create new OS thread … errno=11": the host reads that from stderr.
func threads(args []string) Report {
	limit := intArg(args, 0, 2000)
	debug.SetMaxThreads(limit + 100)
	started := make(chan struct{})
	block := make(chan struct{})
	for i := 0; i < limit; i++ {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			<-block
		}()
		<-started
	}
	close(block)
	return Report{Count: limit}
}
