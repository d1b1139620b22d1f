package pool

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/sandbox"
)

// tenantBackends lists every backend the cross-tenant test runs on; a new
// backend is one more line (and its control, if it can have one).
func tenantBackends() []tenantBackend {
	proc := func(reset string) func(*testing.T) Factory {
		return func(*testing.T) Factory { return procboxFactory(reset) }
	}
	return []tenantBackend{
		{name: "procbox-destroy", factory: proc("")},
		{name: "procbox-verified-reset", factory: proc("verified")},
		{name: "procbox-lying-reset-control", factory: proc("lying"), found: " files env memory tmp process"},
		{name: "native", factory: nativeFactory},
		// Were A's native sandbox not destroyed, its workspace would stay on
		// the host; B still cannot read it, since native gives every sandbox
		// its own uid.
		{name: "native-no-destroy-control", factory: deferDestroy(nativeFactory), residue: true},
		{name: "container", factory: func(t *testing.T) Factory { return ociFactory(oci.NewContainer)(t) }},
		{name: "gvisor", factory: func(t *testing.T) Factory { return ociFactory(oci.NewGVisor)(t) }},
		{name: "microvm", factory: microvmFactory},
		// wasm is not a row: its workloads are modules, not shell scripts.
		// Every wasm invocation gets a fresh instance from the pooling
		// allocator; backend/wasm's tests show nothing carries over.
	}
}

// backendFactory adapts a real backend the way the manager will: Prepare
// for one template. It fails the test if the backend does not probe as
// available (tests run as root; only a non-root run is skipped).
func backendFactory(t testing.TB, b sandbox.Backend, tmpl sandbox.Template) Factory {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root (cgroups, mounts); tests run as root in CI", b.Name())
	}
	if c := b.Probe(context.Background()); !c.Available {
		t.Fatalf("%s unavailable: %s", b.Name(), c.Reason)
	}
	return func(ctx context.Context) (sandbox.Sandbox, error) { return b.Prepare(ctx, tmpl) }
}

func nativeFactory(t *testing.T) Factory { return newNativeFactory(t) }

func newNativeFactory(t testing.TB) Factory {
	b, err := native.New(native.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return backendFactory(t, b, sandbox.Template{Kind: sandbox.KindCommand})
}

// deferDestroy wraps a backend so that the pool's Destroy does nothing until
// the test ends: the positive control for "the pool destroys used sandboxes".
func deferDestroy(inner func(*testing.T) Factory) func(*testing.T) Factory {
	return func(t *testing.T) Factory {
		f := inner(t)
		return func(ctx context.Context) (sandbox.Sandbox, error) {
			sb, err := f(ctx)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { sb.Destroy(context.Background()) })
			return &lateDestroy{Sandbox: sb}, nil
		}
	}
}

type lateDestroy struct{ sandbox.Sandbox }

func (*lateDestroy) Destroy(context.Context) error { return nil }
