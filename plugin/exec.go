package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Exit codes of ExecMain.
const (
	execOK       = 0 // the call ran; stdout holds its Result, whatever its end
	execRefused  = 2 // usage, or a component, grant or argument refused
	execInternal = 3 // the runner itself failed
)

// maxExecArgs bounds the JSON arguments the runner reads from stdin.
const maxExecArgs = 8 << 20

// ExecMain is `wovyr component-exec`, the plugin runner inside a sandbox:
// it calls one function of the component at the path in args with the
// JSON arguments on stdin, through this package's own host (the same
// grants, limits and value mapping as in-process, at wasm strength inside
// whatever sandbox it runs in), and writes the call's Result as JSON to
// stdout. The host that started it has checked the manifest; the runner
// checks the grants again.
func ExecMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("component-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fn := fs.String("func", "", "the exported function to call")
	fuel := fs.Uint64("fuel", 0, "fuel for the call (0: the host default)")
	memory := fs.Int64("memory", 0, "linear memory bytes (0: the host default)")
	wall := fs.Duration("wall", 0, "the call's deadline (0: the host default)")
	compiled := fs.Bool("compiled", false, "COMPONENT is the host's compiled component (trusted as machine code), not a component")
	engineMemory := fs.Uint64("engine-memory", 0, "with -compiled: the compiling engine's largest linear memory, which shapes its code")
	var grants []string
	fs.Func("grant", "an interface the component may import (repeatable)", func(v string) error {
		grants = append(grants, v)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wovyr component-exec -func NAME [-grant IFACE]... [-fuel N] [-memory BYTES] [-wall D] [-compiled -engine-memory BYTES] COMPONENT < ARGS_JSON")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || *fn == "" {
		if err == nil {
			fs.Usage()
		}
		return execRefused
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "wovyr component-exec:", err)
		return code
	}
	in, err := io.ReadAll(io.LimitReader(stdin, maxExecArgs+1))
	if err != nil || len(in) > maxExecArgs {
		return fail(execRefused, fmt.Errorf("arguments: %d bytes or more (at most %d): %v", len(in), maxExecArgs, err))
	}
	// Inside the sandbox this process is the boundary's inner side: its
	// host runs any class in-process.
	floors, err := sandbox.Floors{}.WithFloor(sandbox.Untrusted, sandbox.Wasm, true)
	if err == nil {
		floors, err = floors.WithFloor(sandbox.Hostile, sandbox.Wasm, true)
	}
	if err != nil {
		return fail(execInternal, err)
	}
	lim := Limits{Fuel: *fuel, Memory: *memory, WallMS: wall.Milliseconds()}
	h, err := NewHost(Config{Floors: floors, Limits: lim, Slots: 2, MaxIdle: 1, EpochTick: time.Millisecond, engineMemory: *engineMemory, oneShot: true})
	if err != nil {
		return fail(execInternal, err)
	}
	defer h.Close()
	m := &Manifest{Name: "plugin", Trust: sandbox.Untrusted, Capabilities: grants}
	if *compiled {
		// Mapped, not read: a JavaScript component's code is 60 MB.
		_, err = h.loadCompiled(m, fs.Arg(0))
	} else {
		var wasm []byte
		if wasm, err = os.ReadFile(fs.Arg(0)); err == nil {
			m.Component = Digest(wasm)
			_, err = h.Load(m, wasm)
		}
	}
	if err != nil {
		return fail(execRefused, err)
	}
	r, err := h.Call(ctx, "runner", "plugin", *fn, json.RawMessage(in), CallOptions{})
	var se *sandbox.Error
	switch {
	case errors.As(err, &se) && se.Class == sandbox.BadInput:
		return fail(execRefused, err)
	case err != nil:
		return fail(execInternal, err)
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		return fail(execInternal, err)
	}
	return execOK
}
