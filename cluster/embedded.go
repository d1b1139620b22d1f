package cluster

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxPayload is the largest message the embedded server carries: the
// largest a NATS server allows. A dispatched invocation or a record larger
// than the connection's limit is refused as too large, never cut.
const MaxPayload = 64 << 20

// EmbeddedOptions configure an embedded NATS server.
type EmbeddedOptions struct {
	// Name is the server's name in its NATS cluster (the node's name).
	Name string
	// Region tags the server "region:<region>", for stream placement.
	Region string
	// Listen is the client address (host:port; port 0 picks a free one).
	Listen string
	// ClusterListen is the route address; empty means no NATS cluster.
	ClusterListen string
	// ClusterName names the NATS cluster.
	ClusterName string
	// Routes are the other servers' route URLs.
	Routes []string
	// GatewayListen is the gateway address: this server's NATS cluster
	// (ClusterName) is one cluster of a supercluster, one cluster per
	// region (ADR 0031). Empty means no gateway.
	GatewayListen string
	// Gateways are the other clusters' gateway URLs, by cluster name
	// (nats://127.0.0.1:7222).
	Gateways map[string][]string
	// StoreDir holds JetStream's files.
	StoreDir string
	// MaxPayload is the largest message the server carries. Zero means
	// the package's MaxPayload, the most a NATS server allows.
	MaxPayload int32
}

// Embedded is a NATS server in this process.
type Embedded struct {
	ns *server.Server
}

// StartEmbedded starts a NATS server with JetStream and waits until it
// accepts connections.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	host, port, err := hostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster: nats listen %q: %w", o.Listen, err)
	}
	opts := &server.Options{
		ServerName: o.Name, Host: host, Port: port,
		JetStream: true, StoreDir: o.StoreDir,
		MaxPayload: MaxPayload, NoSigs: true, NoLog: true,
		// No HTTP monitoring, no leaf nodes, no websocket: loopback
		// clients and routes only.
	}
	if o.MaxPayload > 0 {
		opts.MaxPayload = o.MaxPayload
	}
	if o.Region != "" {
		opts.Tags = []string{"region:" + o.Region}
	}
	if o.ClusterListen != "" {
		ch, cp, err := hostPort(o.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("cluster: nats cluster_listen %q: %w", o.ClusterListen, err)
		}
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: ch, Port: cp}
		opts.Routes = server.RoutesFromStr(strings.Join(o.Routes, ","))
	}
	if o.GatewayListen != "" {
		if opts.Gateway, err = gatewayOpts(o); err != nil {
			return nil, err
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: nats server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("cluster: the embedded nats server did not start listening on %s", o.Listen)
	}
	return &Embedded{ns: ns}, nil
}

// ClientURL is where clients connect.
func (e *Embedded) ClientURL() string { return e.ns.ClientURL() }

// Current reports whether the server's JetStream has caught up: it has a
// meta leader and every stream and consumer it holds a replica of is
// current. A restarted server answers an error until then, naming what
// lags.
func (e *Embedded) Current() error {
	h := e.ns.Healthz(nil)
	if h.Status == "ok" {
		return nil
	}
	return fmt.Errorf("cluster: nats %s not current: %s", e.ns.Name(), h.Error)
}

// Shutdown stops the server and waits until it has.
func (e *Embedded) Shutdown() {
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
}

// gatewayOpts is o's gateway: its cluster's name, its address, and the
// other clusters it dials, in a stable order.
func gatewayOpts(o EmbeddedOptions) (server.GatewayOpts, error) {
	host, port, err := hostPort(o.GatewayListen)
	if err != nil {
		return server.GatewayOpts{}, fmt.Errorf("cluster: nats gateway_listen %q: %w", o.GatewayListen, err)
	}
	if o.ClusterName == "" || o.ClusterListen == "" {
		return server.GatewayOpts{}, errors.New("cluster: a nats gateway needs the server's cluster (cluster_name and cluster_listen)")
	}
	g := server.GatewayOpts{Name: o.ClusterName, Host: host, Port: port}
	for _, name := range slices.Sorted(maps.Keys(o.Gateways)) {
		r := &server.RemoteGatewayOpts{Name: name}
		for _, raw := range o.Gateways[name] {
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" {
				return server.GatewayOpts{}, fmt.Errorf("cluster: nats gateway %s: bad URL %q", name, raw)
			}
			r.URLs = append(r.URLs, u)
		}
		g.Gateways = append(g.Gateways, r)
	}
	return g, nil
}

// hostPort splits a listen address; port 0 becomes the server's "pick a
// free port" (-1: 0 means the default port to NATS).
func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	if n == 0 {
		n = server.RANDOM_PORT
	}
	return h, n, nil
}
