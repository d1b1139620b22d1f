package sched

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// TestHammer: many goroutines submit, cancel and finish tasks while one
// dispatcher calls Next, all released at once, under -race. At the end
// every admitted task was either cancelled or started and Done, and the
// accounting is back to zero.
func TestHammer(t *testing.T) {
	const workers, each = 8, 300
	s := mustNew(t, Config{Capacity: resource.Vector{CPUMillis: 8000, MemoryBytes: 16 << 30, GPU: 2}, ReserveAfter: 2})
	for i := range workers {
		if err := s.AddTenant(fmt.Sprint("t", i), TenantConfig{Weight: int64(1 + i%3), MaxQueued: 50, MaxRunning: 4}); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan string, workers*each)
	stop := make(chan struct{})
	var dispatcher sync.WaitGroup
	dispatcher.Add(1)
	go func() { // the server's dispatch loop
		defer dispatcher.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st, ok := s.Next(s.Free(), time.Now()); ok {
				started <- st.Task.ID
			}
		}
	}()
	var release sync.WaitGroup
	release.Add(1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, cancelled := 0, 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release.Wait()
			tenant := fmt.Sprint("t", w)
			for i := range each {
				id := fmt.Sprintf("%s-%d", tenant, i)
				d := resource.Vector{CPUMillis: int64(100 * (1 + i%20)), MemoryBytes: int64(i%7) << 28, GPU: int64(i % 11 / 10)}
				if err := s.Submit(Task{ID: id, Tenant: tenant, Demand: d}, time.Now()); err != nil {
					continue // queue full: back-pressure
				}
				mu.Lock()
				admitted++
				mu.Unlock()
				if i%5 == 0 && s.Cancel(id) == nil {
					mu.Lock()
					cancelled++
					mu.Unlock()
				}
				_, _ = s.Stats(tenant)
			}
		}()
	}
	done := make(chan int)
	go func() { // finishes started tasks
		n := 0
		for id := range started {
			if err := s.Done(id); err != nil {
				t.Error(err)
			}
			n++
		}
		done <- n
	}()
	release.Done()
	wg.Wait()
	for deadline := 0; s.Queued() > 0; deadline++ {
		if deadline > 10_000 {
			t.Fatalf("%d tasks never started", s.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	dispatcher.Wait()
	close(started)
	finished := <-done
	if finished+cancelled != admitted || !s.InUse().IsZero() {
		t.Fatalf("admitted %d, cancelled %d, finished %d, in use %v", admitted, cancelled, finished, s.InUse())
	}
	var sum TenantStats
	for _, st := range s.Snapshot() {
		sum.Admitted += st.Admitted
		sum.Started += st.Started
		sum.Completed += st.Completed
		sum.Cancelled += st.Cancelled
		if st.Queued != 0 || st.Running != 0 || st.Reserved {
			t.Fatalf("tenant left busy: %+v", st)
		}
	}
	if int(sum.Admitted) != admitted || int(sum.Started) != finished || sum.Completed != sum.Started || int(sum.Cancelled) != cancelled {
		t.Fatalf("counters %+v vs admitted %d finished %d cancelled %d", sum, admitted, finished, cancelled)
	}
}
