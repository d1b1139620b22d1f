package sched

import (
	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

// Defaults for zero configuration fields.
const (
	DefaultMaxQueued       = 1 << 16 // tasks queued across all tenants
	DefaultReserveAfter    = 8       // missed turns before a head task gets a reservation
	DefaultTenantMaxQueued = 256     // tasks queued per tenant
	DefaultTenantRunning   = 16      // tasks running per tenant
	MaxWeight              = 1 << 20 // largest tenant weight
	MaxTaskID              = 128     // longest task id, in bytes
)

// rebaseAt bounds the virtual pick counter so that weight × counter stays far
// from int64 overflow (MaxWeight × rebaseAt = 2^52).
const rebaseAt = 1 << 32

// Config is the scheduler-wide configuration. It is validated once, by New.
type Config struct {
	// Capacity is the total resource vector the scheduler hands out. A task
	// whose demand exceeds it in any dimension is refused at Submit. A zero
	// dimension means the resource does not exist here (no GPUs).
	Capacity resource.Vector
	// MaxQueued bounds the tasks queued across all tenants; beyond it Submit
	// answers ErrQueueFull. Zero means DefaultMaxQueued.
	MaxQueued int
	// ReserveAfter is K: a head task that missed its turn for lack of room
	// (its credit beat the winner's) more than K times gets a reservation.
	// Zero means DefaultReserveAfter.
	ReserveAfter int
	// Charge is what a start costs in the round-robin. The zero value,
	// ChargePicks, is plain SWRR: every start costs one pick.
	Charge Charge
	// Placer puts a task that demands GPUs on concrete devices; a head
	// whose vector fits but that the Placer cannot place does not fit. Nil
	// means GPUs are counted only (the vector is the whole story).
	Placer Placer
}

func (c Config) withDefaults() (Config, error) {
	if c.Capacity.Negative() {
		return c, badInput(ErrBadConfig, "capacity", "capacity must not be negative: %s", c.Capacity)
	}
	if c.MaxQueued < 0 {
		return c, badInput(ErrBadConfig, "max_queued", "must not be negative")
	}
	if c.ReserveAfter < 0 {
		return c, badInput(ErrBadConfig, "reserve_after", "must not be negative")
	}
	if c.Charge != ChargePicks && c.Charge != ChargeDominantShare {
		return c, badInput(ErrBadConfig, "charge", "unknown charge %d", c.Charge)
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.ReserveAfter == 0 {
		c.ReserveAfter = DefaultReserveAfter
	}
	return c, nil
}

// TenantConfig is one tenant's share and bounds; it comes from the tenant
// configuration of the server.
type TenantConfig struct {
	// Weight is the tenant's share in the round-robin, 1..MaxWeight. Zero
	// is invalid: every tenant names its weight.
	Weight int64
	// MaxQueued bounds the tenant's queue; beyond it Submit answers
	// ErrQueueFull. Zero means DefaultTenantMaxQueued.
	MaxQueued int
	// MaxRunning is the tenant's concurrency quota: a tenant with this many
	// tasks running is not eligible until one is Done (its tasks wait; none
	// is rejected for it). Zero means DefaultTenantRunning.
	MaxRunning int
	// MaxGPU is the tenant's GPU quota: the GPUs its running tasks may hold
	// at once. A tenant whose head would exceed it waits like one at
	// MaxRunning; a task demanding more than MaxGPU is refused at Submit.
	// Zero means no quota beyond the capacity.
	MaxGPU int64
}

func (c TenantConfig) withDefaults() (TenantConfig, error) {
	switch {
	case c.Weight < 1 || c.Weight > MaxWeight:
		return c, badInput(ErrBadConfig, "weight", "weight %d must be in 1..%d", c.Weight, MaxWeight)
	case c.MaxQueued < 0:
		return c, badInput(ErrBadConfig, "max_queued", "must not be negative")
	case c.MaxRunning < 0:
		return c, badInput(ErrBadConfig, "max_running", "must not be negative")
	case c.MaxGPU < 0:
		return c, badInput(ErrBadConfig, "max_gpus", "must not be negative")
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultTenantMaxQueued
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = DefaultTenantRunning
	}
	return c, nil
}

func validTenantName(name string) error {
	if !sandbox.ValidTenant(name) {
		return badInput(ErrBadConfig, "tenant", "invalid tenant name %q", name)
	}
	return nil
}

// validateTask checks a task against the capacity; it has no side effects.
func validateTask(t Task, capacity resource.Vector) error {
	switch {
	case t.ID == "" || len(t.ID) > MaxTaskID:
		return badInput(ErrBadTask, "id", "task id must be 1..%d bytes", MaxTaskID)
	case t.Demand.Negative():
		return badInput(ErrBadTask, "resources", "demand must not be negative: %s", t.Demand)
	case !t.Demand.Fits(capacity):
		return badInput(ErrTooLarge, "resources", "demand %s exceeds capacity %s", t.Demand, capacity)
	}
	return nil
}

// effective is what Next may hand out: the caller's view of free resources
// capped by the scheduler's own accounting, never below zero.
func effective(free, capacity, inUse resource.Vector) resource.Vector {
	own := capacity.Sub(inUse)
	return clip(resource.Vector{
		CPUMillis:   min(free.CPUMillis, own.CPUMillis),
		MemoryBytes: min(free.MemoryBytes, own.MemoryBytes),
		GPU:         min(free.GPU, own.GPU),
	})
}

// clip raises every negative dimension to zero.
func clip(v resource.Vector) resource.Vector {
	return resource.Vector{CPUMillis: max(v.CPUMillis, 0), MemoryBytes: max(v.MemoryBytes, 0), GPU: max(v.GPU, 0)}
}
