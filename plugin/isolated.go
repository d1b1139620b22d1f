package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
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
//
// The runner gets the host capabilities its grants name, each without a
// way around the boundary: log's entries come back in its answer; kv reads
// a copy of the tenant's data shipped with the call, and its writes come
// back to be checked and applied (isolated_kv.go); http goes from the
// sandbox, which the manager places in an egress slot bound to the call's
// network policy, to that slot's explicit proxy, which decides each
// request exactly as it does for the in-process host's slot (a deny-all
// call gets a sandbox without a network, and the runner answers every
// request denied).

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

// runnerAnswer is the runner's stdout: the call's Result and, for a
// plugin granted kv, the keys the call changed (isolated_kv.go).
type runnerAnswer struct {
	Result
	KVWrites []store.KVEntry `json:"kv_writes,omitempty"`
}

// Files of the runner's workspace besides the component.
const (
	componentFile = "component.wasm"
	rootsFile     = "roots.pem" // Config.FetchRoots
)

// callIsolated runs fn with args (already checked against its type) in
// the runner, and believes of its answer only a value of fn's result type
// and key-value writes that a guest could have made.
func (p *Plugin) callIsolated(ctx context.Context, tenant string, f *wasmcapi.Export, args json.RawMessage, opts CallOptions) (*Result, error) {
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
	files := []sandbox.File{{Path: componentFile, Data: p.isolated.file, Mode: 0o444}}
	output := int64(4 << 20)
	var network netpolicy.Policy
	if p.imports(hostKV) {
		snap, err := p.kvSnapshot(tenant)
		if err != nil {
			return nil, err
		}
		files = append(files, sandbox.File{Path: kvFile, Data: snap, Mode: 0o444})
		quota := h.kvQuota()
		argv = append(argv, "-kv", kvFile, "-kv-quota", strconv.FormatInt(quota, 10))
		output += 2 * (int64(len(snap)) + quota) // the writes, in base64
	}
	if p.imports(hostHTTP) {
		argv = append(argv, "-fetch-max-body", strconv.FormatInt(h.maxBody(), 10))
		if h.cfg.FetchRoots != nil {
			files = append(files, sandbox.File{Path: rootsFile, Data: h.cfg.FetchRoots, Mode: 0o444})
			argv = append(argv, "-fetch-roots", rootsFile)
		}
		if !opts.Network.DenyAll() { // the sandbox gets a slot bound to it
			network = opts.Network
			argv = append(argv, "-proxy-port", strconv.Itoa(int(h.cfg.Egress.ProxyPort())))
		}
	}
	var size int64
	for _, f := range files {
		size += int64(len(f.Data))
	}
	if size > sandbox.MaxFileBytes {
		return nil, sandbox.Errorf(sandbox.Unenforceable, "", "plugin %s's code and the tenant's key-value data (%d bytes together) do not fit in a sandbox's files (%d)",
			p.manifest.Name, size, sandbox.MaxFileBytes)
	}
	argv = append(argv, componentFile)
	inv := &sandbox.Invocation{
		Tenant:   tenant,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv, Stdin: args, Files: files},
		Limits: sandbox.Limits{Wall: p.limits.wall() + isolatedGrace, Memory: p.limits.Memory + isolatedMemory, Output: output,
			Disk: max(sandbox.DefaultDisk, size+16<<20)},
		Policy: sandbox.Policy{Trust: p.manifest.Trust, Network: network},
	}
	res, err := h.cfg.Isolated.Run(ctx, inv)
	if err != nil {
		return nil, err
	}
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner on %s ended %s (exit %d): %s",
			res.Backend, res.Class, res.ExitCode, oneLine(string(res.Stderr)))
	}
	var ans runnerAnswer
	if err := json.Unmarshal(res.Stdout, &ans); err != nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner's answer is not a result: %v", err)
	}
	out := ans.Result
	out.Fresh, out.Invocation = true, res.ID
	if out.End != "ok" || f.Type.Result == nil {
		out.Value = json.RawMessage("null")
	} else if out.Value, err = resultValue(f, out.Value); err != nil {
		return nil, err
	}
	if len(ans.KVWrites) > 0 && !p.imports(hostKV) {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner answered key-value writes for a plugin without %s", hostKV)
	}
	if err := p.applyKV(tenant, ans.KVWrites); err != nil {
		return nil, err
	}
	return &out, nil
}

// resultValue is the runner's value of f's result, which was written
// inside the sandbox: only a value of the result's type, rewritten in its
// canonical form, gets out.
func resultValue(f *wasmcapi.Export, raw json.RawMessage) (json.RawMessage, error) {
	x, err := decodeOne(raw)
	if err == nil {
		var v wasmcapi.Val
		if v, err = fromJSON(f.Type.Result, x, "value"); err == nil {
			raw, err = Value(f.Type.Result, &v)
		}
	}
	if err != nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the plugin runner's value is not a %s: %v", f.Type.Result, err)
	}
	return raw, nil
}

func oneLine(s string) string {
	if len(s) > 4096 {
		s = s[:4096]
	}
	return string(bytes.Join(bytes.Fields([]byte(s)), []byte(" ")))
}
