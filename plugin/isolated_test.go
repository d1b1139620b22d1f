package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// answer is a Runner that records the invocation and answers with stdout.
type answer struct {
	inv    *sandbox.Invocation
	stdout string
}

func (a *answer) Run(_ context.Context, inv *sandbox.Invocation) (*sandbox.Result, error) {
	a.inv = inv
	return &sandbox.Result{ID: "inv-1", Backend: "gvisor", Class: sandbox.OK, Stdout: []byte(a.stdout)}, nil
}

// TestIsolatedCalls: an untrusted plugin's call becomes an invocation of
// the runner at the plugin's trust (the component as a read-only file,
// the arguments on stdin, the limits as flags), and of the runner's answer
// only a value of the function's result type gets out.
func TestIsolatedCalls(t *testing.T) {
	run := &answer{stdout: `{"value": 42, "end": "ok", "fuel_used": 2}`}
	h := newHost(t, Config{Dir: t.TempDir(), Isolated: run, IsolatedArgv: []string{"/runner", "component-exec"}})
	calc := component(t, "calc")
	m := &Manifest{Name: "calc", Component: Digest(calc), Trust: sandbox.Untrusted, Limits: Limits{Fuel: 1000, Memory: 1 << 20, WallMS: 500}}
	if info, err := h.Load(m, calc); err != nil || !info.Isolated {
		t.Fatalf("%+v %v", info, err)
	}
	r := call(t, h, "acme", "calc", "add", `{"a": 40, "b": 2}`)
	if string(r.Value) != "42" || r.End != "ok" || !r.Fresh || r.Invocation != "inv-1" {
		t.Errorf("result %+v", r)
	}
	w := run.inv.Workload
	want := []string{"/runner", "component-exec", "-func", "add", "-fuel", "1000", "-memory", "1048576", "-wall", "500ms",
		"-compiled", "-engine-memory", strconv.FormatUint(h.engine.Config().MaxMemory, 10), "component.wasm"}
	if !reflect.DeepEqual(w.Argv, want) || string(w.Stdin) != `{"a": 40, "b": 2}` || run.inv.Policy.Trust != sandbox.Untrusted ||
		len(w.Files) != 1 || w.Files[0].Mode != 0o444 || wasmcapi.IsComponent(w.Files[0].Data) || run.inv.Tenant != "acme" {
		t.Errorf("invocation %+v", run.inv)
	}
	// The runner loads what was shipped (the compiled component) and calls.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, componentFile), w.Files[0].Data, 0o444); err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string(nil), w.Argv[2:len(w.Argv)-1]...), filepath.Join(dir, componentFile))
	var stdout, stderr bytes.Buffer
	if code := ExecMain(context.Background(), argv, bytes.NewReader(w.Stdin), &stdout, &stderr); code != execOK ||
		!strings.Contains(stdout.String(), `"value":42`) {
		t.Fatalf("the runner on what was shipped: exit %d, %s %s", code, stdout.String(), stderr.String())
	}
	// What is not a compiled component is refused, typed.
	if err := os.WriteFile(argv[len(argv)-1], calc, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := ExecMain(context.Background(), argv, bytes.NewReader(w.Stdin), &stdout, &stderr); code != execRefused ||
		!strings.Contains(stderr.String(), "the compiled component does not load") {
		t.Fatalf("a component passed as compiled: exit %d, %s", code, stderr.String())
	}
	for _, bad := range []string{`{"value": "42", "end": "ok"}`, `{"value": 4294967296, "end": "ok"}`, `not json`} {
		run.stdout = bad
		_, err := h.Call(context.Background(), "acme", "calc", "add", json.RawMessage(`[1, 2]`), CallOptions{})
		if sandbox.ClassOf(err) != sandbox.BackendFailure {
			t.Errorf("answer %s: %v", bad, err)
		}
	}
	run.stdout = `{"value": null, "end": "trap", "error": "boom"}`
	if r := call(t, h, "acme", "calc", "crash", ``); r.End != "trap" || r.Error != "boom" {
		t.Errorf("trap: %+v", r)
	}
}
