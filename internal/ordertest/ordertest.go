// Package ordertest records the order in which sandboxed invocations
// start, for fairness tests through the daemon: each invocation appends
// its tenant's name to a file every sandbox uid may write, and a blocker
// holds its devices or slot until the test opens a gate.
package ordertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Order is one test's order file and gate.
type Order struct {
	file, gate string
}

// New makes the order file and gate path in a temp dir, removed when t
// ends. Every sandbox runs as its own uid: both are everyone's.
func New(t *testing.T) *Order {
	t.Helper()
	dir, err := os.MkdirTemp("", "wovyr-order-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	o := &Order{file: filepath.Join(dir, "order"), gate: filepath.Join(dir, "go")}
	if err := os.WriteFile(o.file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(o.file, 0o666)
	return o
}

// Blocker is a shell script that waits until Open.
func (o *Order) Blocker() string {
	return fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.01; done`, o.gate)
}

// Record is a shell script that appends name to the order.
func (o *Order) Record(name string) string { return fmt.Sprintf("echo %s >> %s", name, o.file) }

// Open lets the blocker finish.
func (o *Order) Open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(o.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Want fails t unless the recorded names, in order, are want
// (space-separated).
func (o *Order) Want(t *testing.T, want string) {
	t.Helper()
	got, err := os.ReadFile(o.file)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(strings.Fields(string(got)), " "); s != want {
		t.Fatalf("start order %q, want %q", s, want)
	}
}
