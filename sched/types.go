package sched

import (
	"time"

	"github.com/wovyr/wovyr/resource"
)

// Task is one unit of work to schedule, typically one invocation. The
// scheduler copies it; the caller maps ID back to its own record.
type Task struct {
	ID     string          // unique among queued and running tasks, 1..MaxTaskID bytes
	Tenant string          // a tenant added with AddTenant
	Demand resource.Vector // what it holds while running; must fit Config.Capacity
}

// Start is a task that Next started. Its demand now counts as in use until
// Done.
type Start struct {
	Task Task
	// Wait is the now passed to Next minus the now passed to Submit,
	// never negative.
	Wait time.Duration
	// Reserved says it started from a reservation, out of turn (its tenant
	// still paid for the pick in round-robin credit).
	Reserved bool
	// Devices are the GPUs the Config's Placer assigned to it, nil without
	// a Placer or when the task demands no GPU.
	Devices []string
}

// TenantStats is one tenant's state and counters, for metrics.
type TenantStats struct {
	Tenant     string
	Weight     int64
	MaxQueued  int
	MaxRunning int

	Queued   int             // queue depth now
	Running  int             // started and not yet Done
	InUse    resource.Vector // sum of the running tasks' demands
	Reserved bool            // the head task holds a reservation
	Credit   int64           // SWRR credit, in charge units (debugging; sums to zero over tenants that never left)
	Charged  int64           // the charges of its starts: picks, or ShareUnit steps of dominant share

	Admitted  uint64 // Submit accepted
	Rejected  uint64 // Submit answered ErrQueueFull
	Started   uint64 // handed out by Next
	Completed uint64 // Done
	Cancelled uint64 // Cancel of a queued task

	WaitTotal time.Duration // sum of Start.Wait over Started tasks
	WaitMax   time.Duration // largest Start.Wait
}
