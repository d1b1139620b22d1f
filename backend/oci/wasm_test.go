package oci

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
)

// wasmGuest is a WASI guest in C: it prints its argv, $K and its stdin,
// writes /workspace/out.txt (or $OUT), spins on "spin" and exits with atoi(argv[1]).
const wasmGuest = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
  printf("\n");
  const char *k = getenv("K");
  if (k) printf("K=%s\n", k);
  char buf[256];
  size_t n = fread(buf, 1, sizeof buf, stdin);
  fwrite(buf, 1, n, stdout);
  const char *out = getenv("OUT");
  FILE *f = fopen(out ? out : "/workspace/out.txt", "w");
  if (f) { fputs("from wasm", f); fclose(f); }
  if (argc > 1 && strcmp(argv[1], "spin") == 0) for (volatile unsigned long i = 0;; i++);
  return argc > 1 ? atoi(argv[1]) : 0;
}
`

// wasmBackends returns both OCI backends with the real runner (cmd/wovyr
// linked statically, as production installs it: TestMain builds it) and the
// C test guest (clang, wasi-libc).
func wasmBackends(t *testing.T) (map[string]*Backend, []byte) {
	t.Helper()
	dir := t.TempDir()
	src, guest := filepath.Join(dir, "guest.c"), filepath.Join(dir, "guest.wasm")
	if err := os.WriteFile(src, []byte(wasmGuest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("clang", "--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-o", guest, src).CombinedOutput(); err != nil {
		t.Fatalf("guest (apt clang lld wasi-libc): %v\n%s", err, out)
	}
	mod, err := os.ReadFile(guest)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	c, err := NewContainer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Backend{"container": c, "gvisor": g}, mod
}

func wasmInv(mod []byte, argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{Tenant: "acme", Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: mod, Argv: argv},
		Policy: sandbox.Policy{Trust: sandbox.Untrusted}}
}

func runWasm(t *testing.T, b *Backend, inv *sandbox.Invocation) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindWasm})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(ctx, inv)
	if derr := sb.Destroy(ctx); derr != nil {
		t.Error(derr)
	}
	assertNoLeftovers(t, b, sb.(*Sandbox))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestWasmRunsThroughTheRunner runs a real WASI module through `wovyr
// wasm-exec` inside both sandboxes: exact argv, environment, stdin, stdout,
// exit code and workspace file, the workspace at workdir "/", then the fuel
// limit.
func TestWasmRunsThroughTheRunner(t *testing.T) {
	bs, mod := wasmBackends(t)
	for name, b := range bs {
		t.Run(name, func(t *testing.T) {
			if !slices.Contains(b.Kinds(), sandbox.KindWasm) {
				t.Fatalf("kinds %v lack wasm with a runner configured", b.Kinds())
			}
			inv := wasmInv(mod, "guest", "7", "a b")
			inv.Workload.Env = []string{"K=v"}
			inv.Workload.Stdin = []byte("piped\n")
			inv.Workload.Collect = []string{"out.txt"}
			res := runWasm(t, b, inv)
			if res.Class != sandbox.OK || res.ExitCode != 7 || string(res.Stdout) != "guest 7 a b\nK=v\npiped\n" {
				t.Fatalf("class %q exit %d stdout %q stderr %q", res.Class, res.ExitCode, res.Stdout, res.Stderr)
			}
			if len(res.Files) != 1 || string(res.Files[0].Data) != "from wasm" {
				t.Fatalf("workspace files %+v", res.Files)
			}
			// The runner preopens the workspace at the workload's workdir.
			inv = wasmInv(mod, "guest")
			inv.Workload.Workdir, inv.Workload.Env = "/", []string{"OUT=/out.txt"}
			inv.Workload.Collect = []string{"out.txt"}
			if res := runWasm(t, b, inv); res.Class != sandbox.OK || len(res.Files) != 1 || string(res.Files[0].Data) != "from wasm" {
				t.Fatalf("workdir /: class %q exit %d files %+v stderr %q", res.Class, res.ExitCode, res.Files, res.Stderr)
			}
			inv = wasmInv(mod, "guest", "spin")
			inv.Limits.Fuel = 1_000_000
			if res := runWasm(t, b, inv); res.Class != sandbox.OutOfFuel {
				t.Fatalf("spin under fuel: class %q exit %d stderr %q", res.Class, res.ExitCode, res.Stderr)
			}
		})
	}
}

// TestWasmSelection: with the runner configured, the manager sends a wasm
// workload that needs container strength to container, and an untrusted
// one (floor gvisor) to gvisor; without it, neither takes wasm.
func TestWasmSelection(t *testing.T) {
	bs, _ := wasmBackends(t)
	sel := func(bs map[string]*Backend, p sandbox.Policy) (sandbox.Backend, error) {
		var list []sandbox.Backend
		var certs cert.Set
		for _, b := range bs {
			capa := b.Probe(context.Background())
			if !capa.Available {
				t.Skip(capa.Reason)
			}
			list = append(list, b)
			certs = append(certs, cert.Record{Key: cert.Key{Backend: b.Name(), RuntimeVersion: capa.Version, Kernel: cert.Kernel(), ConfigHash: capa.ConfigHash},
				Passed: true, Outcomes: []cert.Outcome{{ID: 61, Name: "stub for selection", Applies: true, Pass: true, ControlFlagged: true}}})
		}
		m, err := manager.New(manager.Config{Backends: list, Certs: certs, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return m.Select(context.Background(), p, sandbox.KindWasm)
	}
	b, err := sel(bs, sandbox.Policy{Trust: sandbox.Internal, Preference: sandbox.Container})
	if err != nil || b.Name() != "container" {
		t.Fatalf("internal, preference container: %v, %v", b, err)
	}
	b, err = sel(bs, sandbox.Policy{Trust: sandbox.Untrusted})
	if err != nil || b.Name() != "gvisor" {
		t.Fatalf("untrusted: %v, %v", b, err)
	}
	cfg := testConfig(t)
	cfg.WasmRunner = ""
	pc, err := NewContainer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]*Backend{"container": pc, "gvisor": pg}
	if _, err := sel(plain, sandbox.Policy{Trust: sandbox.Untrusted}); !errors.Is(err, sandbox.FloorUnmet) {
		t.Fatalf("without a runner: %v, want floor-unmet", err)
	}
}

// TestJobDirectoryLinkLeadsNowhere: a job directory replaced by a link to a
// host directory (as a template or an earlier command in the sandbox
// could make it) is resolved inside the sandbox's rootfs: the module and a
// large file are never written to the host directory, and the job fails
// as a backend failure instead.
func TestJobDirectoryLinkLeadsNowhere(t *testing.T) {
	bs, mod := wasmBackends(t)
	b := bs["container"]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host := t.TempDir()
	for _, inv := range []*sandbox.Invocation{wasmInv(mod), {Tenant: "acme",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"},
			Files: []sandbox.File{{Path: "big", Data: make([]byte, hostPlaced)}}}, Policy: sandbox.Policy{Trust: sandbox.Untrusted}}} {
		sb, err := b.Prepare(ctx, sandbox.Template{Kind: inv.Workload.Kind})
		if err != nil {
			t.Fatal(err)
		}
		s := sb.(*Sandbox)
		job := filepath.Join(s.dir, "rootfs", jobDir)
		if err := os.RemoveAll(job); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(host, job); err != nil {
			t.Fatal(err)
		}
		_, err = sb.Run(ctx, inv)
		if derr := sb.Destroy(ctx); derr != nil {
			t.Error(derr)
		}
		if !errors.Is(err, sandbox.BackendFailure) {
			t.Errorf("%s job through a linked job directory: %v, want a backend failure", inv.Workload.Kind, err)
		}
		if ents, _ := os.ReadDir(host); len(ents) != 0 {
			t.Fatalf("the host directory got %v", ents)
		}
	}
}
