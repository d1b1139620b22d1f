package session

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

// Timeout bounds and defaults. A session never outlives MaxLifetimeLimit.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultMaxLifetime = time.Hour
	MinTimeout         = time.Second
	MaxLifetimeLimit   = 24 * time.Hour
)

// Spec is what a tenant asks of a new session.
type Spec struct {
	Image     string
	Limits    sandbox.Limits // see sandbox.Claim: the session's envelope
	Policy    sandbox.Policy
	Resources resource.Vector
	// IdleTimeout ends a session that ran no exec or file operation for
	// that long (reading its record does not count).
	// Zero means DefaultIdleTimeout; it must be at least MinTimeout and at
	// most MaxLifetime.
	IdleTimeout time.Duration
	// MaxLifetime ends a session that long after its creation, whatever
	// it is doing. Zero means DefaultMaxLifetime; at most
	// MaxLifetimeLimit.
	MaxLifetime time.Duration
}

// withDefaults returns sp with its zero timeouts filled in, validated:
// a bad timeout is BadInput naming its field.
func (sp Spec) withDefaults() (Spec, error) {
	if sp.IdleTimeout == 0 {
		sp.IdleTimeout = DefaultIdleTimeout
	}
	if sp.MaxLifetime == 0 {
		sp.MaxLifetime = max(DefaultMaxLifetime, sp.IdleTimeout)
	}
	switch {
	case sp.MaxLifetime < MinTimeout || sp.MaxLifetime > MaxLifetimeLimit:
		return sp, sandbox.Errorf(sandbox.BadInput, "max_lifetime", "must be between %s and %s", MinTimeout, MaxLifetimeLimit)
	case sp.IdleTimeout < MinTimeout || sp.IdleTimeout > sp.MaxLifetime:
		return sp, sandbox.Errorf(sandbox.BadInput, "idle_timeout", "must be between %s and the session's max_lifetime (%s)", MinTimeout, sp.MaxLifetime)
	}
	return sp, nil
}

// Validate checks sp for a session of tenant without side effects, as
// Create does first: bad input is BadInput naming its field.
func (sp Spec) Validate(tenant string) error {
	sp, err := sp.withDefaults()
	if err != nil {
		return err
	}
	return sp.claim(newID(), tenant).Validate()
}

// claim is sp's sandbox claim for session id of tenant.
func (sp Spec) claim(id, tenant string) *sandbox.Claim {
	return &sandbox.Claim{ID: id, Tenant: tenant, Image: sp.Image, Limits: sp.Limits, Policy: sp.Policy, Resources: sp.Resources}
}

// newID is an unguessable session id: 128 random bits, in the form of
// sandbox ids (sandbox.ValidTenant).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}
