package wasm

import (
	"context"
	"fmt"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

// ProbeKey implements sandbox.ProbeCacher. Wasmtime is linked into this
// binary (covered by every key); the probe also runs in a worker process,
// Config.Worker, whose binary is keyed too.
func (b *Backend) ProbeKey() string {
	k := probecache.NewKey(Name).Add(wasmcapi.Version, b.cfg.hash(), b.cfg.StateDir, b.pool != nil)
	if len(b.cfg.Worker) > 0 {
		k.Command(b.cfg.Worker[0]).Add(b.cfg.Worker[1:])
	}
	return k.String()
}

// Adopt implements sandbox.ProbeCacher: the probe chooses nothing, so an
// answer of this configuration is adopted as it is.
func (b *Backend) Adopt(_ context.Context, capa sandbox.Capability) error {
	if h := b.cfg.hash(); capa.ConfigHash != h {
		return fmt.Errorf("wasm: stored probe is for config %s, this is %s", capa.ConfigHash, h)
	}
	return nil
}
