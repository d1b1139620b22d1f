package plugin

import (
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Limits bound one call of a plugin. In a manifest, zero fields take the
// host's values; in the host's configuration, zero fields take the
// defaults below.
type Limits struct {
	// Fuel is the wasm instructions a call may use (Wasmtime's fuel units).
	// Zero means 1e9 on the host.
	Fuel uint64 `json:"fuel,omitempty"`
	// Memory caps an instance's linear memory in bytes. Zero means 64 MiB
	// on the host.
	Memory int64 `json:"memory,omitempty"`
	// WallMS is a call's wall-clock deadline in milliseconds. Zero means
	// 10 s on the host.
	WallMS int64 `json:"wall_ms,omitempty"`
}

func (l Limits) withDefaults() Limits {
	if l.Fuel == 0 {
		l.Fuel = 1e9
	}
	if l.Memory == 0 {
		l.Memory = 64 << 20
	}
	if l.WallMS == 0 {
		l.WallMS = 10_000
	}
	return l
}

func (l Limits) validate(field string) error {
	if l.Memory < 0 || l.WallMS < 0 {
		return sandbox.Errorf(sandbox.BadInput, field, "limits cannot be negative")
	}
	return nil
}

// within returns l (a manifest's) with zero fields taken from host, or a
// bad-input error when one exceeds host's.
func (l Limits) within(host Limits) (Limits, error) {
	over := func(what string, got, max any) error {
		return sandbox.Errorf(sandbox.BadInput, "manifest.limits."+what, "%v exceeds this host's limit of %v", got, max)
	}
	switch {
	case l.Fuel > host.Fuel:
		return l, over("fuel", l.Fuel, host.Fuel)
	case l.Memory > host.Memory:
		return l, over("memory", l.Memory, host.Memory)
	case l.WallMS > host.WallMS:
		return l, over("wall_ms", l.WallMS, host.WallMS)
	}
	if l.Fuel == 0 {
		l.Fuel = host.Fuel
	}
	if l.Memory == 0 {
		l.Memory = host.Memory
	}
	if l.WallMS == 0 {
		l.WallMS = host.WallMS
	}
	return l, nil
}

func (l Limits) wall() time.Duration { return time.Duration(l.WallMS) * time.Millisecond }
