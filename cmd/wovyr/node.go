package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/backend/wasm"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// storeWait is how long a one-shot command waits for the state store.
const storeWait = 10 * time.Second

// node is this machine's backends and manager, wired explicitly.
type node struct {
	g        *globals
	log      *slog.Logger
	native   *native.Backend
	wasm     *wasm.Backend
	oci      []*oci.Backend // container (crun/runc) and gvisor (runsc)
	microvm  *microvm.Backend
	network  *egress.Service // allowlisted egress, or nil: none
	backends []sandbox.Backend
	mgr      *manager.Manager
}

// openNode constructs every backend and a manager that sees the current
// certifications and stored probe answers (a snapshot; the store is not
// held open). Constructing a backend is cheap: what costs — an engine, a
// probe — happens when the manager first needs that backend.
func openNode(g *globals) (*node, error) {
	return openNodeWith(g, nil)
}

// openNodeWith is openNode with an egress service (the daemon's
// configuration, for certify --config).
func openNodeWith(g *globals, network *egress.Service) (*node, error) {
	n, err := newNode(g, g.logger(), nodeOptions{network: network})
	if err != nil {
		return nil, err
	}
	certs, probes, err := n.readState()
	if err != nil {
		return nil, err
	}
	n.mgr, err = manager.New(manager.Config{Backends: n.backends, Certs: certs, Probes: probes, Logger: n.log})
	return n, err
}

// nodeOptions are what the daemon builds differently from a one-shot
// command.
type nodeOptions struct {
	// network, if not nil, gives the native, container, gvisor and
	// microvm backends allowlisted egress (the daemon's); without it their
	// sandboxes have no network at all.
	network *egress.Service
	// pooled prepares sandboxes for the daemon's warm pools: microVM
	// Prepare boots the VM, so that pooled VMs answer over their control
	// channel (one-shot commands boot per invocation instead, through the
	// block-device protocol; both modes share a certification: the battery
	// runs both), and container and gVisor Prepare run a warm-up exec
	// (oci.Config.Pooled).
	pooled bool
	// gvisorSnapshots fills the gVisor pools with clones of golden
	// snapshots (config.Snapshots.GVisor, ADR 0020).
	gvisorSnapshots bool
}

// newNode constructs every backend, without a manager. Without root it
// constructs only the wasm backend, unprivileged, and stands the others in
// as rootOnly.
func newNode(g *globals, log *slog.Logger, o nodeOptions) (*node, error) {
	network := o.network
	n := &node{g: g, log: log, network: network}
	if err := makeStateDir(g.stateDir); err != nil {
		return nil, err
	}
	if unprivileged() {
		worker, err := wasmWorker()
		if err != nil {
			return nil, err
		}
		if n.wasm, err = wasm.New(wasm.Config{StateDir: g.stateDir, Logger: n.log, Worker: worker, Unprivileged: true}); err != nil {
			return nil, err
		}
		n.backends = append(rootOnlyBackends(), n.wasm)
		return n, nil
	}
	var err error
	n.native, err = native.New(native.Config{ScratchDir: n.nativeScratch(), Logger: n.log, Network: network})
	if err != nil {
		return nil, err
	}
	worker, err := wasmWorker()
	if err != nil {
		return nil, err
	}
	if n.wasm, err = wasm.New(wasm.Config{StateDir: g.stateDir, Logger: n.log, Worker: worker}); err != nil {
		return nil, err
	}
	n.backends = []sandbox.Backend{n.native, n.wasm}
	ocfg := oci.Config{StateDir: g.stateDir, Agent: g.guest, Logger: n.log, Network: network, WasmRunner: wasmRunner(), Pooled: o.pooled}
	ccfg, gcfg := ocfg, ocfg
	ccfg.Runtime = g.containerRuntime
	gcfg.Snapshots = o.gvisorSnapshots
	for _, mk := range []func() (*oci.Backend, error){
		func() (*oci.Backend, error) { return oci.NewContainer(ccfg) },
		func() (*oci.Backend, error) { return oci.NewGVisor(gcfg) },
	} {
		b, err := mk()
		if sandbox.ClassOf(err) == sandbox.BadInput {
			return nil, fmt.Errorf("--container-runtime: %w", err)
		}
		if err != nil {
			n.log.Warn("backend not constructed", "err", err)
			continue
		}
		n.oci = append(n.oci, b)
		n.backends = append(n.backends, b)
	}
	if n.microvm, err = microvm.New(microvm.Config{StateDir: g.stateDir, Guest: g.guest, Logger: n.log, Network: network, Warm: o.pooled}); err != nil {
		return nil, err
	}
	n.backends = append(n.backends, n.microvm)
	return n, nil
}

// makeStateDir makes the state dir. As root it is 0711: sandbox uids
// traverse it to their workspaces, and what lies below is private to each
// owner. Without root no other uid needs it: 0700.
func makeStateDir(dir string) error {
	mode := os.FileMode(0o711)
	if unprivileged() {
		mode = 0o700
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return stateDirError{dir, err}
	}
	if err := os.Chmod(dir, mode); err != nil {
		return stateDirError{dir, err}
	}
	return nil
}

// stateDirError says the state dir cannot be made, and without root where
// the default comes from and how to choose another.
type stateDirError struct {
	dir string
	err error
}

func (e stateDirError) Error() string {
	msg := fmt.Sprintf("state dir %s: %v", e.dir, e.err)
	if unprivileged() {
		msg += "; without root the state dir is $XDG_STATE_HOME/wovyr, else $HOME/.local/state/wovyr: give --state-dir DIR (or WOVYR_STATE_DIR) a directory this user can write"
	}
	return msg
}

func (e stateDirError) Unwrap() error { return e.err }

// nativeScratch is where native sandboxes' workspaces live.
func (n *node) nativeScratch() string { return filepath.Join(n.g.stateDir, "scratch", "native") }

// Close releases the backends' resources (the wasm engine and its ticker).
func (n *node) Close() error {
	if n.wasm == nil {
		return nil
	}
	return n.wasm.Close()
}

// withStore opens the state store for the duration of fn.
func (n *node) withStore(fn func(*store.Store) error) error {
	s, err := store.Open(n.g.stateDir, storeWait)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// readState reads the certifications and the stored probe answers in one
// opening of the store.
func (n *node) readState() (*store.CertSnapshot, *storedProbes, error) {
	var set *store.CertSnapshot
	var recs []probecache.Record
	err := n.withStore(func(s *store.Store) error {
		var err error
		if set, err = s.CertSnapshot(); err != nil {
			return fmt.Errorf("read certifications: %w", err)
		}
		if recs, err = s.Probes(); err != nil {
			return fmt.Errorf("read stored probes: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return set, newStoredProbes(n, recs), nil
}

// storedProbes is a one-shot command's manager.ProbeCache: the answers read
// when the node opened, and writes that open the store for a moment (a
// command that holds the store would block every other one).
type storedProbes struct {
	n    *node
	mu   sync.Mutex
	recs map[[2]string]probecache.Record // by backend, key
}

func newStoredProbes(n *node, recs []probecache.Record) *storedProbes {
	p := &storedProbes{n: n, recs: map[[2]string]probecache.Record{}}
	for _, r := range recs {
		p.recs[[2]string{r.Backend, r.Key}] = r
	}
	return p
}

// CachedProbe implements manager.ProbeCache.
func (p *storedProbes) CachedProbe(backend, key string) (probecache.Record, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.recs[[2]string{backend, key}]
	return r, ok
}

// PutProbe implements manager.ProbeCache.
func (p *storedProbes) PutProbe(r probecache.Record) error {
	p.mu.Lock()
	p.recs[[2]string{r.Backend, r.Key}] = r
	p.mu.Unlock()
	return p.n.withStore(func(s *store.Store) error { return s.PutProbe(r) })
}
