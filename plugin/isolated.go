package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// Plugins whose trust class's floor is above wasm (untrusted, by default)
// never run in this process: each call is an invocation of the plugin
// runner (`wovyr component-exec`, ExecMain) in a fresh sandbox the
// manager selects at that floor, gVisor for untrusted, exactly as a core
// wasm module of that class runs through `wovyr wasm-exec`. The host still
// compiles the component, for its types (arguments are checked here, and
// nothing runs when they do not match), but never instantiates it.
//
// The runner gets the host's compiled component, not the component, where
// it fits in an invocation's files: a 12 MB JavaScript component compiles
// in about 10 s and deserializes in milliseconds. Wasmtime trusts what it
// deserializes as machine code, and here that is right: the host compiled
// it, and whatever it does, it does inside the sandbox, which is the
// boundary for this trust class. The runner's engine is made with the
// host's code-shaping settings (-engine-memory), so the code fits it.

// Runner runs one invocation at its policy's floor; *manager.Manager is
// one.
type Runner interface {
	Run(ctx context.Context, inv *sandbox.Invocation) (*sandbox.Result, error)
}

// isolatedGrace is the runner's time besides the call's own deadline:
// its start and the component's load (or its compile, where the compiled
// component is too large to ship: a 12 MB JavaScript component takes
// about 10 s).
const isolatedGrace = 30 * time.Second

// isolatedCode is what a plugin's calls run out of process: the compiled
// component, or the component where that is too large to ship.
type isolatedCode struct {
	file     []byte
	compiled bool
}

// maxShipped bounds the compiled component shipped with a call: the
// invocation's files hold at most sandbox.MaxFileBytes, and the call's
// arguments travel beside it.
const maxShipped = sandbox.MaxFileBytes - 4<<20

// shipped is what an isolated plugin of comp (compiled from wasm) sends
// with each call.
func shipped(comp *wasmcapi.Component, wasm []byte) (*isolatedCode, error) {
	b, err := comp.Serialize()
	if err != nil {
		return nil, sandbox.Wrap(sandbox.BackendFailure, err, "serialize the component")
	}
	if len(b) > maxShipped {
		return &isolatedCode{file: wasm}, nil
	}
	return &isolatedCode{file: b, compiled: true}, nil
}

// isolatedMemory is the runner's memory besides the plugin's linear
// memory: Wasmtime, the compile.
const isolatedMemory = 512 << 20

// isolatedImports says why a plugin run out of process cannot have one of
// its imports, or "". WASI is the runner's own; of wovyr:host it gets log
// (its entries come back in the result): kv and http would need the
// daemon's store and egress inside the sandbox.
func isolatedImports(imports []string) error {
	for _, imp := range imports {
		iface, _ := splitVersion(imp)
		if grantableHost[iface] && iface != hostLog {
			return sandbox.Errorf(sandbox.Unenforceable, "manifest.capabilities",
				"the component imports %s, which a plugin of a trust class above wasm (run out of process) does not get", imp)
		}
	}
	return nil
}

// callIsolated runs fn with args (already checked against its type) in
// the runner, and believes of its answer only a value of fn's result type.
func (p *Plugin) callIsolated(ctx context.Context, tenant string, f *wasmcapi.Export, args json.RawMessage) (*Result, error) {
	h := p.host
	argv := append([]string(nil), h.cfg.IsolatedArgv...)
	argv = append(argv, "-func", f.Name, "-fuel", strconv.FormatUint(p.limits.Fuel, 10),
		"-memory", strconv.FormatInt(p.limits.Memory, 10), "-wall", p.limits.wall().String())
	if p.isolated.compiled {
		argv = append(argv, "-compiled", "-engine-memory", strconv.FormatUint(h.engine.Config().MaxMemory, 10))
	}
	for _, g := range p.manifest.Capabilities {
		argv = append(argv, "-grant", g)
	}
	argv = append(argv, componentFile)
	inv := &sandbox.Invocation{
		Tenant: tenant,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv, Stdin: args,
			Files: []sandbox.File{{Path: componentFile, Data: p.isolated.file, Mode: 0o444}}},
		Limits: sandbox.Limits{Wall: p.limits.wall() + isolatedGrace, Memory: p.limits.Memory + isolatedMemory, Output: 4 << 20,
			Disk: max(sandbox.DefaultDisk, int64(len(p.isolated.file))+16<<20)},
		Policy: sandbox.Policy{Trust: p.manifest.Trust},
	}
	res, err := h.cfg.Isolated.Run(ctx, inv)
	if err != nil {
		return nil, err
	}
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner on %s ended %s (exit %d): %s",
			res.Backend, res.Class, res.ExitCode, oneLine(string(res.Stderr)))
	}
	var out Result
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner's answer is not a result: %v", err)
	}
	out.Fresh, out.Invocation = true, res.ID
	if out.End != "ok" || f.Type.Result == nil {
		out.Value = json.RawMessage("null")
		return &out, nil
	}
	// The answer was written inside the sandbox: only a value of the
	// result's type, rewritten in its canonical form, gets out.
	x, err := decodeOne(out.Value)
	if err == nil {
		var v wasmcapi.Val
		if v, err = fromJSON(f.Type.Result, x, "value"); err == nil {
			out.Value, err = Value(f.Type.Result, &v)
		}
	}
	if err != nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner's value is not a %s: %v", f.Type.Result, err)
	}
	return &out, nil
}

// componentFile is the component's name in the runner's workspace.
const componentFile = "component.wasm"

func oneLine(s string) string {
	if len(s) > 4096 {
		s = s[:4096]
	}
	return string(bytes.Join(bytes.Fields([]byte(s)), []byte(" ")))
}
