package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
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
	kvPath := fs.String("kv", "", "the tenant's key-value data (JSON, from the host); grants wovyr:host/kv its copy")
	kvQuota := fs.Int64("kv-quota", 0, "with -kv: the tenant's key-value quota in bytes")
	proxyPort := fs.Uint("proxy-port", 0, "the egress slot's explicit proxy port on the gateway /etc/resolv.conf names (0: no network)")
	rootsPath := fs.String("fetch-roots", "", "PEM roots for wovyr:host/http over https (default: the system's)")
	maxBody := fs.Int64("fetch-max-body", 0, "wovyr:host/http's body cap each way (0: the host default)")
	var grants []string
	fs.Func("grant", "an interface the component may import (repeatable)", func(v string) error {
		grants = append(grants, v)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wovyr component-exec -func NAME [-grant IFACE]... [-fuel N] [-memory BYTES] [-wall D] [-compiled -engine-memory BYTES]\n"+
			"       [-kv FILE -kv-quota BYTES] [-proxy-port N] [-fetch-roots PEM] [-fetch-max-body BYTES] COMPONENT < ARGS_JSON")
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
	cfg := Config{Floors: floors, Limits: lim, Slots: 2, MaxIdle: 1, EpochTick: time.Millisecond, engineMemory: *engineMemory, oneShot: true,
		KVQuota: *kvQuota, FetchMaxBody: *maxBody, sandboxNet: &sandboxNet{}}
	var kv *snapshotKV
	if *kvPath != "" {
		if kv, err = readSnapshot(*kvPath); err != nil {
			return fail(execRefused, err)
		}
		cfg.KV = kv
	}
	if *rootsPath != "" {
		if cfg.FetchRoots, err = os.ReadFile(*rootsPath); err != nil {
			return fail(execRefused, err)
		}
	}
	if *proxyPort != 0 {
		if cfg.sandboxNet.proxy, err = slotProxy(resolvConf, uint16(*proxyPort)); err != nil {
			return fail(execInternal, err)
		}
	}
	h, err := NewHost(cfg)
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
	ans := runnerAnswer{Result: *r}
	if kv != nil {
		ans.KVWrites = kv.writes()
	}
	if err := json.NewEncoder(stdout).Encode(ans); err != nil {
		return fail(execInternal, err)
	}
	return execOK
}

// sandboxNet is the runner's network: its sandbox sits in the call's
// egress slot, whose explicit proxy is at proxy; "" means none (the call's
// policy is deny-all).
type sandboxNet struct{ proxy string }

// resolvConf names the slot's stub, on the gateway that also holds its
// proxy (egress.Slot.ResolvConf): the backend binds it into every sandbox
// in a slot.
const resolvConf = "/etc/resolv.conf"

// slotProxy is the slot's explicit proxy: port on the gateway that the
// resolver file at path names.
func slotProxy(path string, port uint16) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the egress slot's gateway: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			if ip, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(ip, port).String(), nil
			}
		}
	}
	return "", fmt.Errorf("the egress slot's gateway: %s names no nameserver", path)
}

// readSnapshot reads the tenant's key-value data the host shipped.
func readSnapshot(path string) (*snapshotKV, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key-value data: %w", err)
	}
	var entries []store.KVEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("key-value data: %w", err)
	}
	return newSnapshotKV(entries), nil
}
