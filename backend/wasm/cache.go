package wasm

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wovyr/wovyr/internal/artifact"
	"github.com/wovyr/wovyr/internal/wasmcapi"
	"github.com/wovyr/wovyr/sandbox"
)

// cache holds linked modules (InstancePre) in memory, keyed by module digest,
// and their compiled code on disk.
//
// # Why verify on-disk artifacts
//
// A serialized Wasmtime module is machine code that runs in this process;
// Wasmtime checks its header but not its code. An artifact is therefore
// trusted only if its key (module digest, engine config hash, Wasmtime
// version) and a SHA-256 over the payload match; anything else is deleted
// and recompiled from the module bytes.
type cache struct {
	engine *wasmcapi.Engine
	dir    string
	max    int
	log    *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry // by module digest
	clock   uint64            // LRU clock
	loading map[string]*load  // single flight per digest
	closed  bool

	compiled, loaded, discarded atomic.Int64 // artifacts, for metrics and tests
}

type entry struct {
	pre *wasmcapi.InstancePre
	// namesPaths says the module imports a WASI function that can name a
	// path or find a preopen; one that imports none cannot tell whether a
	// workspace is preopened, so it runs without one (and in-process).
	namesPaths bool
	refs       int
	used       uint64
	evicted    bool
}

type load struct {
	done chan struct{}
	e    *entry
	err  error
}

func newCache(e *wasmcapi.Engine, dir string, max int, log *slog.Logger) *cache {
	return &cache{engine: e, dir: dir, max: max, log: log, entries: map[string]*entry{}, loading: map[string]*load{}}
}

// key is the artifact key for a module digest on this engine.
func (c *cache) key(moduleDigest string) string {
	return digest([]byte(moduleDigest + "|" + c.engine.Config().CodeHash() + "|wasmtime-" + wasmcapi.Version))
}

// acquire returns the linked module for wasm, compiling or loading it if
// needed. The caller must release it. An invalid module is BadInput.
func (c *cache) acquire(wasm []byte) (*entry, error) { return c.acquireDigest(digest(wasm), wasm) }

// acquireDigest is acquire for a caller that has wasm's digest d already.
func (c *cache) acquireDigest(d string, wasm []byte) (*entry, error) {
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, sandbox.Errorf(sandbox.BackendFailure, "", "wasm backend is closed")
		}
		if e, ok := c.entries[d]; ok {
			c.clock++
			e.used, e.refs = c.clock, e.refs+1
			c.mu.Unlock()
			return e, nil
		}
		l, ok := c.loading[d]
		if !ok {
			break
		}
		c.mu.Unlock()
		<-l.done
		if l.err != nil {
			return nil, l.err
		}
		c.mu.Lock()
	}
	l := &load{done: make(chan struct{})}
	c.loading[d] = l
	c.mu.Unlock()

	pre, paths, err := c.link(d, wasm)
	c.mu.Lock()
	delete(c.loading, d)
	if err == nil && c.closed {
		pre.Close()
		err = sandbox.Errorf(sandbox.BackendFailure, "", "wasm backend is closed")
	}
	if err != nil {
		l.err = err
		c.mu.Unlock()
		close(l.done)
		return nil, err
	}
	c.clock++
	e := &entry{pre: pre, namesPaths: paths, refs: 1, used: c.clock}
	c.entries[d] = e
	c.evictLocked()
	c.mu.Unlock()
	close(l.done)
	return e, nil
}

// release drops a reference; an evicted entry is freed at its last release.
func (c *cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.evicted {
		e.pre.Close()
	}
}

func (c *cache) evictLocked() {
	for len(c.entries) > c.max {
		var oldest string
		for d, e := range c.entries {
			if oldest == "" || e.used < c.entries[oldest].used {
				oldest = d
			}
		}
		e := c.entries[oldest]
		delete(c.entries, oldest)
		e.evicted = true
		if e.refs == 0 {
			e.pre.Close()
		}
	}
}

func (c *cache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for d, e := range c.entries {
		delete(c.entries, d)
		e.evicted = true
		if e.refs == 0 {
			e.pre.Close()
		}
	}
}

// link loads the module's compiled code from disk or compiles it, then links
// it against WASI. paths reports whether it can name a path (namesPaths).
func (c *cache) link(moduleDigest string, wasm []byte) (pre *wasmcapi.InstancePre, paths bool, err error) {
	m, err := c.module(moduleDigest, wasm)
	if err != nil {
		return nil, false, err
	}
	defer m.Close()
	pre, err = c.engine.Prelink(m)
	if err != nil {
		return nil, false, sandbox.Wrap(sandbox.BadInput, err, "wasm module cannot be linked against WASI preview1 (it may import something else)")
	}
	return pre, namesPaths(m.Imports()), nil
}

// namesPaths reports whether imports include a WASI preview1 function that
// reaches a directory descriptor's contents: every path_* call, and
// fd_prestat_get and fd_readdir, which find and list a preopen. Without
// one, a module can hold a preopened directory's descriptor but never open,
// create, list or name anything in it.
func namesPaths(imports []wasmcapi.Import) bool {
	for _, im := range imports {
		if im.Module != "wasi_snapshot_preview1" && im.Module != "wasi_unstable" {
			continue
		}
		if strings.HasPrefix(im.Name, "path_") || im.Name == "fd_prestat_get" || im.Name == "fd_readdir" {
			return true
		}
	}
	return false
}

func (c *cache) module(moduleDigest string, wasm []byte) (*wasmcapi.Module, error) {
	key := c.key(moduleDigest)
	path := filepath.Join(c.dir, key+".cwasm")
	if m, err := c.loadArtifact(path, key); err == nil {
		c.loaded.Add(1)
		return m, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.discarded.Add(1)
		c.log.Warn("wasm: discarding compiled artifact", "path", path, "err", err)
		_ = os.Remove(path)
	}
	m, err := c.engine.Compile(wasm)
	if err != nil {
		var we *wasmcapi.Error
		if errors.As(err, &we) {
			c.log.Debug("wasm: compile failed", "module", moduleDigest, "detail", we.Detail)
		}
		return nil, sandbox.Wrap(sandbox.BadInput, err, "invalid wasm module")
	}
	c.compiled.Add(1)
	if err := c.storeArtifact(path, key, m); err != nil {
		c.log.Warn("wasm: cannot store compiled artifact", "path", path, "err", err)
	}
	return m, nil
}

func (c *cache) loadArtifact(path, key string) (*wasmcapi.Module, error) {
	b, err := artifact.Read(path, key)
	if err != nil {
		return nil, err
	}
	m, err := c.engine.Deserialize(b)
	if err != nil {
		return nil, fmt.Errorf("wasmtime refused the artifact: %w", err)
	}
	return m, nil
}

func (c *cache) storeArtifact(path, key string, m *wasmcapi.Module) error {
	payload, err := m.Serialize()
	if err != nil {
		return err
	}
	return artifact.Write(path, key, payload)
}
