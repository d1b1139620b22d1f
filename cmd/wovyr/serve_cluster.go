package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/manager"
)

// nodeName is the config's node name, or one made from the host name and
// the state directory: two daemons on one host (two state directories)
// get two names.
func nodeName(cfg config.Config, stateDir string) string {
	if cfg.Node != "" {
		return cfg.Node
	}
	host, _ := os.Hostname()
	var b strings.Builder
	for _, c := range strings.ToLower(host) {
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' {
			b.WriteRune(c)
		}
	}
	abs, _ := filepath.Abs(stateDir)
	sum := sha256.Sum256([]byte(abs))
	name := strings.TrimLeft(b.String(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	if name == "" {
		name = "node"
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

// joinCluster connects the node to its cluster: an embedded NATS server
// (JetStream, its store in the state directory, loopback only) unless the
// config names an external one. Nil with nats.disabled.
func joinCluster(ctx context.Context, cfg config.Config, stateDir string, mgr *manager.Manager, log *slog.Logger) (*cluster.Node, func(), error) {
	if cfg.NATS.Disabled {
		return nil, func() {}, nil
	}
	url, stop := cfg.NATS.URL, func() {}
	if url == "" {
		e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Name: cfg.Node, Region: cfg.Region,
			Listen: cfg.NATS.Listen, ClusterListen: cfg.NATS.ClusterListen, ClusterName: cfg.NATS.ClusterName,
			Routes: cfg.NATS.Routes, GatewayListen: cfg.NATS.GatewayListen, Gateways: cfg.NATS.Gateways,
			StoreDir: filepath.Join(stateDir, "nats")})
		if err != nil {
			return nil, nil, err
		}
		url, stop = e.ClientURL(), e.Shutdown
		log.Info("embedded nats", "url", url, "cluster_listen", cfg.NATS.ClusterListen, "routes", len(cfg.NATS.Routes),
			"gateway_listen", cfg.NATS.GatewayListen, "gateways", len(cfg.NATS.Gateways))
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := cluster.Connect(cctx, cluster.Options{Name: cfg.Node, Region: cfg.Region, Zone: cfg.Zone, URL: url,
		Heartbeat: cfg.NATS.Heartbeat.D(), AcceptTimeout: cfg.NATS.AcceptWait.D(), QueueTimeout: cfg.NATS.QueueTimeout.D(), PinQueues: cfg.NATS.PinQueues, Replicas: cfg.NATS.Replicas, Retention: cfg.Retention.D(), Capacity: cfg.Concurrency,
		Required: mgr.Required, Logger: log})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("join cluster: %w", err)
	}
	return n, func() { n.Close(); stop() }, nil
}
