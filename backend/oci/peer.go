package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// Peer is the raw runtime that benchmarks measure this backend against:
// the spec a sandbox gets, over the template itself (read-only, no overlay,
// no agent), run by the runtime the probe chose as a user would run it by
// hand — "<runtime> run", through the hybrid wrapper where crun needs it.
type Peer struct {
	d       *driver
	dir     string
	n       int
	release func()
}

// NewPeer writes a peer bundle of the image that runs argv. Close removes
// it.
func (b *Backend) NewPeer(ctx context.Context, img string, argv []string) (*Peer, error) {
	d, err := b.chosen(ctx)
	if err != nil {
		return nil, err
	}
	// A scratch dir of its own, locked like a sandbox's so that a
	// concurrent Reconcile leaves it be, and its own uid range: the raw
	// container must not share one with a live sandbox.
	sc := &Sandbox{b: b, dir: filepath.Join(b.run, "sb", newID(b.gvisor))}
	if err := sc.makeScratch(); err != nil {
		return nil, err
	}
	sl, err := acquireSlot(b.cfg.UIDBase, b.cfg.Slots)
	if err != nil {
		os.RemoveAll(sc.dir)
		sc.lock.Close()
		return nil, err
	}
	p := &Peer{d: d, dir: sc.dir, release: func() { os.RemoveAll(sc.dir); sc.lock.Close(); sl.release() }}
	s, err := buildSpec(specParams{rootfs: image.RootFS(b.imagesDir(), img), agent: b.agent,
		cgroups: "/" + sandboxCgroup(filepath.Base(sc.dir)), ids: sl.ids, limits: sandbox.Limits{}.WithDefaults(), gvisor: b.gvisor})
	if err != nil {
		p.Close()
		return nil, err
	}
	s.Root.Readonly = true
	s.Process.Args, s.Process.Cwd = argv, "/"
	s.Mounts = s.Mounts[:len(s.Mounts)-1] // no agent bind
	js, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(sc.dir, "config.json"), js, 0o600); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Runtime names the runtime the peer runs, e.g. "crun".
func (p *Peer) Runtime() string { return p.d.name }

// Command is the next run of the bundle (a fresh container id) and what
// deletes what the runtime leaves of it, for callers that time the run.
func (p *Peer) Command() (cmd *exec.Cmd, done func()) {
	p.n++
	id := fmt.Sprintf("%s-%d", filepath.Base(p.dir), p.n)
	return p.d.wrapped(p.d.argv("run", "--bundle", p.dir, id)), func() {
		_ = p.d.run(context.Background(), 10*time.Second, "delete", "--force", id)
	}
}

// Run runs the bundle once to completion.
func (p *Peer) Run() error {
	cmd, done := p.Command()
	defer done()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s run: %w: %s", p.d.name, err, out)
	}
	return nil
}

// Close removes the bundle and releases its uid range.
func (p *Peer) Close() { p.release() }
