package wasm

import (
	"context"
	"errors"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// TestManagerSelectsWasmForInternalCode runs a wasm workload through the
// manager: trust "internal" has floor wasm, so a certified wasm backend is
// chosen; a preference above wasm with no stronger backend is floor-unmet.
func TestManagerSelectsWasmForInternalCode(t *testing.T) {
	b := newBackend(t)
	mgr := certifiedManager(t, b)
	in := inv(guest(t, "c/hello"), "hello", "manager")
	res, err := mgr.Run(context.Background(), in)
	if err != nil || res.Backend != Name || string(res.Stdout) != "hello manager\n" || res.ID == "" {
		t.Fatalf("err %v result %+v", err, res)
	}
	in = inv(guest(t, "c/hello"), "hello")
	in.Policy.Preference = sandbox.GVisor
	if _, err := mgr.Run(context.Background(), in); !errors.Is(err, sandbox.FloorUnmet) {
		t.Fatalf("gvisor preference with only wasm registered: %v", err)
	}
}
