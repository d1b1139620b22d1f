package wasm

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// sensitiveHostDirs may never be granted to a guest, nor may any parent of
// the state dir (it holds compiled code and every workspace).
var sensitiveHostDirs = []string{"/", "/proc", "/sys", "/dev", "/etc", "/root", "/home", "/run", "/var/run", "/boot", "/var/lib"}

// lintConfig lists what makes cfg risky (probe 6).
func lintConfig(cfg Config) []string {
	var bad []string
	grants := append([]Preopen(nil), cfg.Preopens...)
	if cfg.weak.extraRoot != "" {
		grants = append(grants, Preopen{Host: "/", Guest: cfg.weak.extraRoot})
	}
	for _, p := range grants {
		for _, s := range sensitiveHostDirs {
			if p.Host == s {
				bad = append(bad, fmt.Sprintf("preopen grants the host's %s at %s", s, p.Guest))
			}
		}
		if rel, err := filepath.Rel(p.Host, cfg.StateDir); err == nil && !strings.HasPrefix(rel, "..") {
			bad = append(bad, fmt.Sprintf("preopen %s contains the state dir", p.Host))
		}
	}
	e := cfg.Engine
	if e.MaxWasmStack > certifiedStack {
		bad = append(bad, fmt.Sprintf("wasm stack %d above %d", e.MaxWasmStack, certifiedStack))
	}
	if e.NoPooling {
		bad = append(bad, "pooling allocator off")
	}
	if cfg.MaxModuleBytes > defaultMaxModule {
		bad = append(bad, fmt.Sprintf("module bound %d above %d", cfg.MaxModuleBytes, defaultMaxModule))
	}
	if cfg.EpochTick > 10*time.Millisecond {
		bad = append(bad, fmt.Sprintf("epoch tick %s above 10ms", cfg.EpochTick))
	}
	if w := cfg.weak; w != (weakness{name: w.name, probeSelf: w.probeSelf, widePreopen: w.widePreopen}) {
		bad = append(bad, fmt.Sprintf("weakened configuration %+v", w))
	}
	return bad
}

var probeRiskyConfig = Probe{
	ID: 6, Name: "risky config",
	// Control: a preopen grants the host root.
	weakness: WeakHostRoot,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		cfg := e.cfg.withDefaults()
		bad := lintConfig(cfg)
		if len(bad) > 0 {
			return "lint the preopens, engine and limits", "RISKY: " + strings.Join(bad, "; "), false
		}
		return "lint the preopens, engine and limits", fmt.Sprintf("%d read-only preopen(s), stack %d, pool on, module bound %d, tick %s",
			len(cfg.Preopens), cfg.Engine.MaxWasmStack, cfg.MaxModuleBytes, cfg.EpochTick), true
	},
}

var probeInfoLeaks = Probe{
	ID: 44, Name: "info leaks",
	weakness: probeAmbient.weakness,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		return probeAmbient.run(ctx, e) // env and argv exactly as given; no /proc to read
	},
}

var probeThreadsStacks = Probe{
	ID: 57, Name: "threads and stacks",
	weakness: probeStackOverflow.weakness,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		// No threads: shared memories are disabled and wasi-threads is not
		// linked, so a threaded module is refused before it runs.
		_, err := e.runWat(ctx, `(module (memory 1 1 shared) (func (export "_start")))`, nil)
		_, err2 := e.runWat(ctx, `(module (import "wasi" "thread-spawn" (func (param i32) (result i32))) (memory 1) (func (export "_start")))`, nil)
		tried, obs, ok := probeStackOverflow.run(ctx, e)
		refused := sandbox.ClassOf(err) == sandbox.BadInput && sandbox.ClassOf(err2) == sandbox.BadInput
		return "a shared-memory module, a wasi-threads module, then " + tried,
			fmt.Sprintf("threads refused: %v; %s", refused, obs), ok && refused
	},
}
