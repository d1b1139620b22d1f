package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Residency says which regions the deployment has and how a tenant's
// invocations are placed among them (package residency compiles Policy
// once, at start-up; a policy that does not compile or does not return
// list(string) stops the daemon before it serves).
type Residency struct {
	// Regions are every region of the deployment. Zero means the node's
	// own Region alone (none when Region is empty).
	Regions []string `json:"regions,omitempty"`
	// Policy is a CEL expression returning list(string): the regions a
	// tenant may use for one invocation (residency.Options.Policy lists
	// its variables). Zero means the tenant's regions, or every region
	// when it lists none.
	Policy string `json:"policy,omitempty"`
	// DataClasses maps a data class an invocation may name
	// (policy.residency.data_class) to the regions its data may be
	// processed in.
	DataClasses map[string][]string `json:"data_classes,omitempty"`
}

// NATS says how the node joins its cluster (package cluster). By default
// the daemon embeds a NATS server with JetStream, on loopback, its store
// under the state directory: one node needs nothing else.
type NATS struct {
	// Disabled runs the node alone: no NATS, no dispatch to other regions
	// (an invocation allowed only elsewhere is residency-unmet).
	Disabled bool `json:"disabled,omitempty"`
	// URL joins an external NATS cluster instead of embedding one (one
	// NATS cluster per region with gateways between them is the
	// multi-region layout, ADR 0031). Zero means embedded.
	URL string `json:"url,omitempty"`
	// Listen is the embedded server's client address. Zero means
	// "127.0.0.1:0", a free loopback port.
	Listen string `json:"listen,omitempty"`
	// ClusterListen is the embedded server's route address, for embedded
	// servers of several nodes to form one NATS cluster. Zero means none:
	// a NATS of one server.
	ClusterListen string `json:"cluster_listen,omitempty"`
	// Routes are the other embedded servers' route URLs
	// (nats-route://127.0.0.1:6223).
	Routes []string `json:"routes,omitempty"`
	// ClusterName names the NATS cluster. Zero means "wovyr".
	ClusterName string `json:"cluster_name,omitempty"`
	// GatewayListen is the embedded server's gateway address: its NATS
	// cluster is then one region's cluster of a supercluster, joined to
	// the other regions' clusters (Gateways) by NATS gateways, the
	// multi-region layout (ADR 0031). Zero means no gateway.
	GatewayListen string `json:"gateway_listen,omitempty"`
	// Gateways are the other clusters' gateway URLs, by cluster name
	// ({"us-east": ["nats://127.0.0.1:7222"]}).
	Gateways map[string][]string `json:"gateways,omitempty"`
	// Replicas is how many NATS servers hold each of the cluster's
	// streams and buckets: 3 with three or more servers, so that one
	// stopping does not stop the cluster. Zero means 1.
	Replicas int `json:"replicas,omitempty"`
	// Heartbeat is how often the node renews its registry entry; an entry
	// not renewed within 3 heartbeats expires and the node is no longer
	// live. Zero means 1s.
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// AcceptWait is how long a node that dispatched an invocation into a
	// region's queue waits for a node there to take it before it answers
	// 202 with the queued record. Zero means 5s.
	AcceptWait Duration `json:"accept_wait,omitempty"`
	// PinQueues requires each region's queue (a JetStream stream holding
	// queued invocations, their stdin and files) to live on NATS servers
	// tagged region:<region> (embedded servers are tagged with their
	// node's region). False places it on any servers, with a warning,
	// where the NATS has too few of them for Replicas.
	PinQueues bool `json:"pin_queues,omitempty"`
	// QueueTimeout is how long an invocation may wait in its region's
	// queue for a node with room; past it, it ends failed (unavailable).
	// Zero means 10m.
	QueueTimeout Duration `json:"queue_timeout,omitempty"`
}

// regionDefaults fills the residency and NATS defaults.
func (c *Config) regionDefaults() {
	c.Residency.Regions = slices.Clone(c.Residency.Regions)
	if len(c.Residency.Regions) == 0 && c.Region != "" {
		c.Residency.Regions = []string{c.Region}
	}
	c.Residency.DataClasses = maps.Clone(c.Residency.DataClasses)
	if len(c.Residency.DataClasses) == 0 {
		c.Residency.DataClasses = nil
	}
	if c.NATS.Listen == "" {
		c.NATS.Listen = "127.0.0.1:0"
	}
	if c.NATS.ClusterName == "" {
		c.NATS.ClusterName = "wovyr"
	}
	if c.NATS.Heartbeat == 0 {
		c.NATS.Heartbeat = Duration(time.Second)
	}
	c.NATS.Routes = slices.Clone(c.NATS.Routes)
	if len(c.NATS.Routes) == 0 {
		c.NATS.Routes = nil
	}
	gw := make(map[string][]string, len(c.NATS.Gateways))
	for name, urls := range c.NATS.Gateways {
		gw[name] = slices.Clone(urls)
	}
	c.NATS.Gateways = gw
	if len(gw) == 0 {
		c.NATS.Gateways = nil
	}
}

func (c Config) validateRegion() error {
	bad := func(field, format string, args ...any) error {
		return sandbox.Errorf(sandbox.BadInput, field, format, args...)
	}
	for f, v := range map[string]string{"region": c.Region, "zone": c.Zone, "node": c.Node} {
		if v != "" && !sandbox.ValidRegion(v) {
			return bad(f, "%q must match %s", v, sandbox.RegionRE)
		}
	}
	if c.Zone != "" && c.Region == "" {
		return bad("zone", "a zone needs a region")
	}
	if c.Region != "" && !slices.Contains(c.Residency.Regions, c.Region) {
		return bad("residency.regions", "the node's region %q is not one of the deployment's regions %v", c.Region, c.Residency.Regions)
	}
	for i, t := range c.Tenants {
		for _, r := range t.Regions {
			if !slices.Contains(c.Residency.Regions, r) {
				return bad(fmt.Sprintf("tenants[%d].regions", i), "region %q is not one of the deployment's regions %v", r, c.Residency.Regions)
			}
		}
	}
	if c.NATS.Replicas < 0 || c.NATS.Replicas > 5 {
		return bad("nats.replicas", "want 1 to 5 (0 means 1)")
	}
	for _, d := range []struct {
		field string
		d     Duration
	}{{"nats.heartbeat", c.NATS.Heartbeat}, {"nats.accept_wait", c.NATS.AcceptWait}, {"nats.queue_timeout", c.NATS.QueueTimeout}} {
		if d.d < 0 {
			return bad(d.field, "must not be negative")
		}
	}
	if c.NATS.URL == "" && !c.NATS.Disabled {
		// The embedded server is for this host's nodes: it listens on
		// loopback only, so no packet of it leaves the machine. A
		// deployment across hosts runs its own NATS (nats.url).
		for f, a := range map[string]string{"nats.listen": c.NATS.Listen, "nats.cluster_listen": c.NATS.ClusterListen} {
			if a == "" {
				continue
			}
			host, _, err := net.SplitHostPort(a)
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				return bad(f, "the embedded NATS server listens on loopback only (want 127.0.0.1:PORT, not %q); use nats.url for a NATS across hosts", a)
			}
		}
		if err := c.validateGateways(); err != nil {
			return err
		}
	}
	return nil
}

func hostOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Hostname()
}

// validateGateways checks the embedded server's gateway: on loopback, of a
// NATS cluster, dialling other clusters on loopback by their names.
func (c Config) validateGateways() error {
	n := c.NATS
	if n.GatewayListen == "" {
		if len(n.Gateways) > 0 {
			return sandbox.Errorf(sandbox.BadInput, "nats.gateways", "gateways need nats.gateway_listen")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(n.GatewayListen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return sandbox.Errorf(sandbox.BadInput, "nats.gateway_listen", "the embedded NATS server listens on loopback only (want 127.0.0.1:PORT, not %q); use nats.url for a NATS across hosts", n.GatewayListen)
	}
	if n.ClusterListen == "" {
		return sandbox.Errorf(sandbox.BadInput, "nats.gateway_listen", "a gateway joins NATS clusters: it needs nats.cluster_listen")
	}
	for _, name := range slices.Sorted(maps.Keys(n.Gateways)) {
		field := "nats.gateways." + name
		if name == n.ClusterName {
			return sandbox.Errorf(sandbox.BadInput, field, "%q is this server's own cluster (nats.cluster_name)", name)
		}
		if !sandbox.ValidRegion(name) {
			return sandbox.Errorf(sandbox.BadInput, field, "a cluster name must match %s", sandbox.RegionRE)
		}
		if len(n.Gateways[name]) == 0 {
			return sandbox.Errorf(sandbox.BadInput, field, "no gateway URL")
		}
		for _, raw := range n.Gateways[name] {
			u, err := url.Parse(raw)
			if err == nil && (u.Scheme != "nats" || u.Port() == "") {
				err = errors.New("not nats://HOST:PORT")
			}
			if ip := net.ParseIP(hostOf(u)); err != nil || ip == nil || !ip.IsLoopback() {
				return sandbox.Errorf(sandbox.BadInput, field, "want nats://127.0.0.1:PORT (the embedded server dials loopback only), not %q", raw)
			}
		}
	}
	return nil
}
