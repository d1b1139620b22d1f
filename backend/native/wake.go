package native

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// wake is a one-shot signal the kernel delivers straight to the thread
// blocked on it (a futex), for hand-offs between a parked thread and Run.
//
// # Why not a channel
//
// A locked thread blocked on a channel is woken through the Go scheduler:
// an idle thread is woken to take the goroutine, finds it locked and wakes
// the locked thread in turn. On a loaded machine every thread wake-up waits
// for a CPU, so on the run path one wake is worth saving. A goroutine
// blocked here holds its thread in the kernel, as in any blocking syscall.
type wake struct{ word atomic.Uint32 }

// futex(2) operations (linux/futex.h).
const (
	futexWait    = 0
	futexWake    = 1
	futexPrivate = 128
)

func (w *wake) signal() {
	w.word.Store(1)
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&w.word)), futexWake|futexPrivate, 1, 0, 0, 0)
}

func (w *wake) wait() {
	for w.word.Load() == 0 {
		// Returns at once (EAGAIN) if signal came first; EINTR loops.
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&w.word)), futexWait|futexPrivate, 0, 0, 0, 0)
	}
}
