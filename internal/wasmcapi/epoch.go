package wasmcapi

import (
	"sync"
	"sync/atomic"
	"time"
)

// EpochTicker advances an engine's epoch every tick while at least one
// call runs. Each running store checks its own deadline on the tick
// (run.c, component.c), so one ticker serves every call of the engine;
// while nothing runs it sleeps until Begin wakes it.
type EpochTicker struct {
	engine  *Engine
	every   time.Duration
	running atomic.Int64
	wake    chan struct{}
	stop    chan struct{}
	stopped sync.Once
	done    sync.WaitGroup
}

// StartEpochTicker starts e's ticker, ticking every d while calls run.
func (e *Engine) StartEpochTicker(d time.Duration) *EpochTicker {
	t := &EpochTicker{engine: e, every: d, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	t.done.Add(1)
	go t.loop()
	return t
}

func (t *EpochTicker) loop() {
	defer t.done.Done()
	tk := time.NewTicker(t.every)
	defer tk.Stop()
	for {
		if t.running.Load() == 0 {
			tk.Stop()
			select {
			case <-t.wake:
				tk.Reset(t.every)
			case <-t.stop:
				return
			}
		}
		select {
		case <-tk.C:
			t.engine.IncrementEpoch()
		case <-t.stop:
			return
		}
	}
}

// Begin and End bracket wasm execution, so the ticker runs only when needed.
func (t *EpochTicker) Begin() {
	if t.running.Add(1) == 1 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// End is Begin's pair.
func (t *EpochTicker) End() { t.running.Add(-1) }

// Running is how many calls are between Begin and End now.
func (t *EpochTicker) Running() int64 { return t.running.Load() }

// Stop ends the ticker and waits for it; it is idempotent.
func (t *EpochTicker) Stop() {
	t.stopped.Do(func() { close(t.stop) })
	t.done.Wait()
}
