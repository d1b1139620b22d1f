package wasm

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot"
)

// The pre-initialised module's files in its snapshot.Build.
const (
	preinitModule = "module.wasm"   // the rewritten module
	preinitDigest = "module.sha256" // its SHA-256, checked before use
)

// preinitFormat versions the transformation: a change to what rewrite
// emits changes it, and so every key.
const preinitFormat = "wovyr-preinit-1"

// preinits resolves a workload's module to the one that runs: the module
// itself, or its pre-initialised form, made once per key (single flight),
// kept on disk in a snapshot.Store beside the compiled-module cache (whose
// entry for the new module is keyed by that module's own digest) and in
// memory for the hot path.
type preinits struct {
	store *snapshot.Store
	hash  string // Key.ConfigHash: the backend's config and the init bounds
	bound initBounds
	max   int
	// tenantInit is the WeakTenantInit control: init sees the first
	// invocation's environment, so its artifact is a tenant's.
	tenantInit bool
	log        *slog.Logger

	mu      sync.Mutex
	memo    map[string]*resolved // by memoKey
	order   []string             // memo insertion order, for eviction
	loading map[string]*resolving

	built, found atomic.Int64 // artifacts made and found on disk, for tests
}

// resolved is what runs for one (module, init) pair.
type resolved struct {
	wasm   []byte // nil: the workload's own module (not pre-initialised)
	digest string // of wasm, when set
	init   string // the export that ran; "" when not pre-initialised
}

type resolving struct {
	done chan struct{}
	r    *resolved
	err  error
}

func memoKey(moduleDigest, init string) string { return moduleDigest + "\x00" + init }

// key is the pre-initialised module's key: any change to the module, the
// init export, the Wasmtime version, the backend's configuration or the
// init bounds voids it.
func (p *preinits) key(moduleDigest, init string) snapshot.Key {
	return snapshot.Key{
		Backend:    Name,
		Version:    "wasmtime " + wasmcapi.Version,
		ConfigHash: p.hash,
		Template:   digest([]byte(memoKey(moduleDigest, init)))[:32],
	}
}

// keep says whether a key on disk is still this backend's (Reconcile).
func (p *preinits) keep(k snapshot.Key) bool {
	return k.Version == "wasmtime "+wasmcapi.Version && k.ConfigHash == p.hash
}

// resolve returns what runs for wasm (whose digest is moduleDigest) with the
// init export named (empty: WizerInit where the module exports it).
// env is the invocation's environment, which only the WeakTenantInit
// control's init ever sees.
func (p *preinits) resolve(ctx context.Context, wasm []byte, moduleDigest, named string, env []string) (*resolved, error) {
	mk := memoKey(moduleDigest, named)
	p.mu.Lock()
	for {
		if r, ok := p.memo[mk]; ok {
			p.mu.Unlock()
			return r, nil
		}
		l, ok := p.loading[mk]
		if !ok {
			break
		}
		p.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if l.err != nil {
			return nil, l.err
		}
		p.mu.Lock()
	}
	l := &resolving{done: make(chan struct{})}
	p.loading[mk] = l
	p.mu.Unlock()

	l.r, l.err = p.load(ctx, wasm, moduleDigest, named, env)
	p.mu.Lock()
	delete(p.loading, mk)
	if l.err == nil { // failures are not kept: a later try may pass (a timeout, say)
		p.memo[mk] = l.r
		p.order = append(p.order, mk)
		for len(p.order) > p.max {
			delete(p.memo, p.order[0])
			p.order = p.order[1:]
		}
	}
	p.mu.Unlock()
	close(l.done)
	return l.r, l.err
}

// load decides whether the module is pre-initialised and, if so, finds its
// artifact on disk or makes it.
func (p *preinits) load(ctx context.Context, wasm []byte, moduleDigest, named string, env []string) (*resolved, error) {
	init, err := initExportOf(wasm, named)
	if err != nil || init == "" {
		return &resolved{}, err
	}
	k := p.key(moduleDigest, init)
	if r, err := p.find(k, init); err == nil {
		p.found.Add(1)
		return r, nil
	} else if !errors.Is(err, snapshot.ErrNotFound) {
		p.log.Warn("wasm: discarding pre-initialised module", "key", k.ID(), "err", err)
		if err := p.store.Remove(k); err != nil {
			return nil, err
		}
	}
	bound := p.bound
	if p.tenantInit {
		bound.env = env
	}
	out, err := preinitialise(ctx, wasm, init, bound)
	if err != nil {
		return nil, err
	}
	r := &resolved{wasm: out, digest: digest(out), init: init}
	if err := p.save(k, r); err != nil {
		// The module still runs; only the next process pays init again.
		p.log.Warn("wasm: cannot store pre-initialised module", "key", k.ID(), "err", err)
	}
	p.built.Add(1)
	return r, nil
}

// initExportOf reads the module's exports to say which init export runs.
// A module this reader cannot follow is not pre-initialised by default (the
// engine reports what is wrong with it); one that names an export must
// have it.
func initExportOf(wasm []byte, named string) (string, error) {
	secs, err := parseSections(wasm)
	if err != nil {
		if named != "" {
			return "", badInit(err)
		}
		return "", nil
	}
	m := &moduleInfo{}
	for _, s := range secs {
		if s.id == secExport {
			if m.exports, err = parseExports(s.body); err != nil {
				if named != "" {
					return "", badInit(err)
				}
				return "", nil
			}
		}
	}
	init, err := m.initExport(named)
	if err != nil {
		return "", badInit(err)
	}
	return init, nil
}

func badInit(err error) error {
	return sandbox.Errorf(sandbox.BadInput, "workload.init", "%v", err)
}

// find loads a stored artifact and checks it against its recorded digest.
func (p *preinits) find(k snapshot.Key, init string) (*resolved, error) {
	g, err := p.store.Find(k)
	if err != nil {
		return nil, err
	}
	wasm, err := os.ReadFile(g.Path(preinitModule))
	if err != nil {
		return nil, err
	}
	want, err := os.ReadFile(g.Path(preinitDigest))
	if err != nil {
		return nil, err
	}
	d := digest(wasm)
	if string(want) != d {
		return nil, errors.New("pre-initialised module does not match its digest (corrupt)")
	}
	return &resolved{wasm: wasm, digest: d, init: init}, nil
}

func (p *preinits) save(k snapshot.Key, r *resolved) error {
	b, err := p.store.Begin(k)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{preinitModule: r.wasm, preinitDigest: []byte(r.digest)} {
		if err := os.WriteFile(b.Path(name), data, 0o600); err != nil {
			b.Abort()
			return err
		}
	}
	_, err = b.Commit()
	return err
}
