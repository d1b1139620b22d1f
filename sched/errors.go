package sched

import (
	"errors"
	"fmt"

	"github.com/wovyr/wovyr/sandbox"
)

// Sentinels. Every error the scheduler returns matches exactly one of them
// with errors.Is. All but ErrQueueFull also match sandbox.BadInput: the call
// was wrong and changed nothing. ErrQueueFull is back-pressure, not a bad
// request: the API maps it to 429 and the caller may retry later.
var (
	ErrQueueFull     = errors.New("queue full")
	ErrUnknownTenant = errors.New("unknown tenant")
	ErrTenantExists  = errors.New("tenant already exists")
	ErrTenantBusy    = errors.New("tenant has queued or running tasks")
	ErrBadConfig     = errors.New("invalid scheduler or tenant configuration")
	ErrBadTask       = errors.New("invalid task")
	ErrTooLarge      = errors.New("task demands more than the total capacity")
	ErrOverQuota     = errors.New("task demands more than its tenant's quota")
	ErrDuplicateTask = errors.New("task id already queued or running")
	ErrUnknownTask   = errors.New("no such task in the required state")
)

// QueueFullError is the admission rejection. It unwraps to ErrQueueFull.
type QueueFullError struct {
	Tenant string
	Global bool // the scheduler-wide bound, not the tenant's, was hit
	Limit  int  // the bound that was hit
}

func (e *QueueFullError) Error() string {
	if e.Global {
		return fmt.Sprintf("queue full: %d tasks queued across all tenants (tenant %s)", e.Limit, e.Tenant)
	}
	return fmt.Sprintf("queue full: tenant %s has %d tasks queued", e.Tenant, e.Limit)
}

// Unwrap makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// badInput builds a sandbox.BadInput error whose cause is the sentinel.
func badInput(sentinel error, field, format string, args ...any) error {
	return &sandbox.Error{Class: sandbox.BadInput, Field: field, Msg: fmt.Sprintf(format, args...), Err: sentinel}
}
