package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/cgroup"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/plugin"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// serveCmd is `wovyr serve`: the daemon. It parses flags and config, wires
// the node to the server package, and runs until SIGINT/SIGTERM.
type serveCmd struct {
	listen, configFile, addrFile string
	hashToken                    bool
}

// tokenFile holds the bootstrap token when no config file names tenants.
const tokenFile = "serve-token"

func serveMain(ctx context.Context, g *globals, args []string) int {
	c := &serveCmd{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "", "address to listen on (default 127.0.0.1:8080; port 0 picks a free one)")
	fs.StringVar(&c.configFile, "config", "", "JSON config file (tenants, quotas, limits); without one, a bootstrap tenant \"default\" is created")
	fs.StringVar(&c.addrFile, "addr-file", "", "write the bound address to this file once listening")
	fs.BoolVar(&c.hashToken, "hash-token", false, "read a token on stdin, print the token_sha256 a config file wants, and exit")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if c.hashToken {
		var tok string
		fmt.Fscanln(os.Stdin, &tok)
		fmt.Println(config.HashToken(strings.TrimSpace(tok)))
		return 0
	}
	if code := refuseUnlessRoot("wovyr serve"); code != 0 {
		return code
	}
	if err := c.run(ctx, g); err != nil {
		fmt.Fprintln(os.Stderr, "wovyr serve:", err)
		return exitBackendFailure
	}
	return 0
}

func (c *serveCmd) run(ctx context.Context, g *globals) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: min(g.logLevel, slog.LevelInfo)}))
	cfg := config.Default()
	var err error
	if c.configFile != "" {
		if cfg, err = config.Load(c.configFile); err != nil {
			return err
		}
	}
	if c.listen != "" {
		cfg.Listen = c.listen
	}
	st, err := store.Open(g.stateDir, time.Second)
	if err != nil {
		return err // ErrLocked: another daemon or a one-shot command holds it
	}
	defer st.Close()
	if len(cfg.Tenants) == 0 {
		if cfg, err = bootstrapTenant(cfg, g.stateDir, log); err != nil {
			return err
		}
	}
	network, err := startEgress(ctx, cfg.Egress, log)
	if err != nil {
		return err
	}
	if network != nil {
		defer network.Close(context.WithoutCancel(ctx))
	}
	n, err := newNode(g, log, nodeOptions{network: network, pooled: true, gvisorSnapshots: cfg.Snapshots.GVisor})
	if err != nil {
		return err
	}
	defer n.Close()
	if n.mgr, err = manager.New(manager.Config{Backends: n.backends, Certs: st, Probes: st, Logger: log}); err != nil {
		return err
	}
	gpus, closeGPUs, err := openGPUs(ctx, cfg.GPU, log)
	if err != nil {
		return err
	}
	defer closeGPUs()
	fair, err := server.NewFairGPU(cfg, gpus)
	if err != nil {
		return err
	}
	cfg.Node = nodeName(cfg, g.stateDir)
	cl, leave, err := joinCluster(ctx, cfg, g.stateDir, n.mgr, log)
	if err != nil {
		return err
	}
	defer leave()
	var isolated plugin.Runner // out-of-process plugins need the runner in OCI sandboxes
	if wasmRunner() != "" {
		isolated = n.mgr
	}
	plugins, err := newPluginHost(cfg.Plugins, g.stateDir, st, network, isolated, log)
	if err != nil {
		return err
	}
	defer plugins.Close() // after Run: no call is in flight any more
	opts := server.Options{
		Config: cfg, Manager: n.mgr, Store: st, Logger: log, Admission: fair, Version: version, Plugins: plugins,
		SessionDir:  filepath.Join(g.stateDir, "sessions"),
		Reconcilers: []server.Reconciler{cgroupReconciler(cfg.CgroupReconcile, n.nativeScratch())},
		Certify:     func(ctx context.Context, backend string) (cert.Record, error) { return n.certifyOne(ctx, backend) },
	}
	if cl != nil {
		opts.Cluster = cl // not a nil *cluster.Node in the interface
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	fmt.Fprintf(os.Stderr, "wovyr: listening on http://%s (state %s)\n", addr, g.stateDir)
	for _, f := range []string{c.addrFile, filepath.Join(g.stateDir, localAddrFile)} {
		if f == "" {
			continue
		}
		if err := writeAddr(f, addr); err != nil {
			return err
		}
	}
	// The state dir's address goes with the daemon (a crash leaves it,
	// and the store's lock, which a reader checks, says it is stale).
	defer os.Remove(filepath.Join(g.stateDir, localAddrFile))
	return srv.Run(ctx, ln)
}

// localAddrFile, in the state dir, is the address of the daemon that holds
// it: where commands without --remote find it (localDaemon).
const localAddrFile = "serve.addr"

func writeAddr(path, addr string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// localDaemon is the URL of the daemon that holds the state dir, from its
// address file, checked against the store's lock: a file a crashed daemon
// left names no one.
func localDaemon(g *globals) (string, bool) {
	b, err := os.ReadFile(filepath.Join(g.stateDir, localAddrFile))
	addr := strings.TrimSpace(string(b))
	if err != nil || addr == "" {
		return "", false
	}
	s, err := store.Open(g.stateDir, 50*time.Millisecond)
	if err == nil {
		s.Close()
		return "", false // nobody holds it
	}
	if !errors.Is(err, store.ErrLocked) {
		return "", false
	}
	return "http://" + addr, true
}

// bootstrapTenant adds tenant "default" (admin) whose token lives in the
// state directory (0600), created once, so that `wovyr serve` works with no
// config and `wovyr run --remote` on the same host finds the token.
func bootstrapTenant(cfg config.Config, stateDir string, log *slog.Logger) (config.Config, error) {
	path := filepath.Join(stateDir, tokenFile)
	tok, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var b [32]byte
		rand.Read(b[:])
		tok = []byte(hex.EncodeToString(b[:]))
		err = os.WriteFile(path, tok, 0o600)
	}
	if err != nil {
		return cfg, fmt.Errorf("bootstrap token: %w", err)
	}
	log.Warn("no tenants configured: created tenant \"default\" (admin) with the token in " + path)
	return cfg.WithTenant(config.Tenant{Name: "default", Admin: true,
		TokenSHA256: []string{config.HashToken(strings.TrimSpace(string(tok)))}})
}

// certifyOne runs the battery for one backend, for POST /v1/backends/{name}/certify.
func (n *node) certifyOne(ctx context.Context, backend string) (cert.Record, error) {
	guest, cleanup, err := battery.StageGuest(n.g.guest)
	if err != nil {
		return cert.Record{}, fmt.Errorf("the battery needs the static wovyr-guest binary (--guest or WOVYR_GUEST): %w", err)
	}
	defer cleanup()
	suites, err := n.suites(guest)
	if err != nil {
		return cert.Record{}, err
	}
	suite, ok := suites[backend]
	if !ok {
		return cert.Record{}, fmt.Errorf("%s: no battery suite yet", backend)
	}
	return battery.Run(ctx, suite, nil)
}

// cgroupReconciler removes the cgroups a crashed daemon left: only those of
// the native sandboxes whose workspaces are still in this state directory
// ("owned", the default: a native sandbox's cgroup is wovyr/native/ID and
// its workspace SCRATCH/ID), or every wovyr cgroup ("all"). It runs before
// the backends' own Reconcile, which unmounts the workspaces.
func cgroupReconciler(mode, nativeScratch string) server.Reconciler {
	if mode != "owned" {
		return server.Reconciler{Name: "cgroups", Fn: func(ctx context.Context) error {
			_, err := cgroup.Reconcile(ctx)
			return err
		}}
	}
	return server.Reconciler{Name: "owned cgroups", Fn: func(ctx context.Context) error {
		ents, err := os.ReadDir(nativeScratch)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var errs []error
		for _, e := range ents {
			if _, err := cgroup.ReconcileUnder(ctx, path.Join(cgroup.Prefix, "native", e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}}
}

// startEgress starts the egress service when the config enables it, after
// removing what a crashed daemon left of its slots.
func startEgress(ctx context.Context, c config.Egress, log *slog.Logger) (*egress.Service, error) {
	if !c.Enabled {
		return nil, nil
	}
	dns, err := egress.ResolvConfServers(c.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	ec := egress.Config{Tag: "d", UpstreamDNS: dns, Uplinks: c.Uplinks, Masquerade: c.Masquerade}
	if err := egress.Reconcile(ctx, ec, log); err != nil {
		return nil, fmt.Errorf("egress reconcile: %w", err)
	}
	return egress.NewService(ctx, ec, log)
}
