package sched_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sched"
)

// The server's use: tenants from config, Submit on each request (a full
// queue is 429), and a dispatch loop that starts what Next hands out and
// calls Done when it ends. Weights {5,1,1} give a a b a c a a.
func Example() {
	s, err := sched.New(sched.Config{Capacity: resource.Vector{CPUMillis: 8000, MemoryBytes: 16 << 30}})
	if err != nil {
		panic(err)
	}
	for _, t := range []struct {
		name   string
		weight int64
	}{{"a", 5}, {"b", 1}, {"c", 1}} { // register in a stable order: it breaks ties
		if err := s.AddTenant(t.name, sched.TenantConfig{Weight: t.weight, MaxQueued: 10}); err != nil {
			panic(err)
		}
	}
	now := time.Unix(0, 0) // the caller's clock; the scheduler reads none
	for i := range 11 {
		for _, tenant := range []string{"a", "b", "c"} {
			task := sched.Task{ID: fmt.Sprintf("%s%d", tenant, i), Tenant: tenant, Demand: resource.Vector{CPUMillis: 500}}
			if err := s.Submit(task, now); errors.Is(err, sched.ErrQueueFull) {
				fmt.Println("429 for", task.ID)
			}
		}
	}
	var order []string
	for range 7 {
		st, ok := s.Next(s.Free(), now.Add(time.Second))
		if !ok {
			break
		}
		order = append(order, st.Task.Tenant)
		_ = s.Done(st.Task.ID) // when the invocation ends
	}
	fmt.Println(strings.Join(order, " "))
	a, _ := s.Stats("a")
	fmt.Printf("queued=%d admitted=%d rejected=%d waited=%v\n", a.Queued, a.Admitted, a.Rejected, a.WaitTotal)
	// Output:
	// 429 for a10
	// 429 for b10
	// 429 for c10
	// a a b a c a a
	// queued=5 admitted=10 rejected=1 waited=5s
}
