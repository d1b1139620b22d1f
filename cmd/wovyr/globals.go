package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// globals are the flags before the command name.
type globals struct {
	stateDir string
	logLevel slog.Level
	guest    string // path of the static wovyr-guest binary
	// containerRuntime is the container backend's OCI runtime: "auto"
	// (crun, else runc), "crun", "runc" or a path. Each runtime is
	// certified on its own (its version is in the certification key).
	containerRuntime string
	// cmd is the command being run ("run", "certify", …), for messages.
	cmd string
}

// defaultStateDir is /var/lib/wovyr for root, else the XDG state dir
// (stateDirError says so when it cannot be made).
func defaultStateDir() string {
	if d := os.Getenv("WOVYR_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/wovyr"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "wovyr")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "wovyr")
}

// defaultGuest finds wovyr-guest: $WOVYR_GUEST, else beside this binary.
func defaultGuest() string {
	if g := os.Getenv("WOVYR_GUEST"); g != "" {
		return g
	}
	return besideExecutable("wovyr-guest")
}

// besideExecutable is name in the running executable's directory.
func besideExecutable(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// wasmRunner finds the static wasm runner the container and gVisor backends
// run wasm workloads with: $WOVYR_WASM_RUNNER, else wovyr-wasm beside this
// binary if it is there (`make build` puts it there). "" means none: those
// backends then take command workloads only.
func wasmRunner() string {
	if r := os.Getenv("WOVYR_WASM_RUNNER"); r != "" {
		return r
	}
	if p := besideExecutable("wovyr-wasm"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func parseGlobals(args []string) (*globals, []string, error) {
	g := &globals{stateDir: defaultStateDir(), logLevel: slog.LevelError, guest: defaultGuest(),
		containerRuntime: cmp.Or(os.Getenv("WOVYR_CONTAINER_RUNTIME"), "auto")}
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		name, val, hasVal := strings.Cut(args[0], "=")
		if name == "--help" {
			return g, args, nil
		}
		if !hasVal {
			if len(args) < 2 {
				return nil, nil, fmt.Errorf("flag %s needs a value", name)
			}
			val, args = args[1], args[1:]
		}
		args = args[1:]
		switch name {
		case "--state-dir":
			g.stateDir = val
		case "--guest":
			g.guest = val
		case "--container-runtime":
			g.containerRuntime = val
		case "--log-level":
			if err := g.logLevel.UnmarshalText([]byte(val)); err != nil {
				return nil, nil, fmt.Errorf("--log-level: %w", err)
			}
		default:
			return nil, nil, errors.New("unknown global flag " + name)
		}
	}
	if r := filepath.Base(g.containerRuntime); g.containerRuntime != "auto" && r != "crun" && r != "runc" {
		return nil, nil, fmt.Errorf("--container-runtime (or WOVYR_CONTAINER_RUNTIME) %q: want auto, crun, runc or a path to one", g.containerRuntime)
	}
	return g, args, nil
}

func (g *globals) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: g.logLevel}))
}

// parseFlags parses a command's flags. It returns the exit code and false
// when the command must stop (help asked: 0; bad flags: exitUsage).
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return exitUsage, false
	}
	return 0, true
}

// mustNode opens the node, or reports why not and returns the exit code.
// The caller closes it. Without root the node offers only unprivileged
// wasm (newNode).
func mustNode(g *globals) (*node, int) {
	n, err := openNode(g)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return nil, exitBackendFailure
	}
	return n, 0
}

// printJSON writes v indented to stdout.
func printJSON(v any) { printJSONTo(os.Stdout, v) }

// printJSONTo writes v to w as indented JSON.
func printJSONTo(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
