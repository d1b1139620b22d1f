// Package config is the daemon's configuration: where it listens, how long
// it keeps results, its request limits, and its tenants with their weights,
// quotas and bearer tokens.
//
// The file format is JSON, read strictly: an unknown key is an error, so a
// misspelt quota is never silently ignored. JSON needs no dependency and is
// what the API speaks too.
//
// A Config is a value. Load and Default return it validated and with every
// default filled in; nothing changes it afterwards (the daemon keeps its own
// copy), so what was validated is what runs.
//
// Tokens are never stored: a tenant lists the SHA-256 of each token (hex),
// so a leaked config file grants nothing. HashToken computes it.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Config is the daemon configuration. Every zero field means its default
// (see Default), which WithDefaults fills in.
type Config struct {
	// Listen is the address to serve on. Zero means "127.0.0.1:8080".
	Listen string `json:"listen,omitempty"`
	// MaxBodyBytes caps a request body (larger: 413). Zero means 96 MiB,
	// room for the largest valid invocation (files and stdin) as base64.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// MaxWait caps ?wait= on submit and get. Zero means 60s.
	MaxWait Duration `json:"max_wait,omitempty"`
	// Retention is how long finished records are kept. Zero means 24h.
	Retention Duration `json:"retention,omitempty"`
	// PurgeEvery is how often expired records are purged. Zero means 10m.
	PurgeEvery Duration `json:"purge_every,omitempty"`
	// ShutdownGrace is how long running invocations may finish after a
	// shutdown begins before they are killed. Zero means 10s.
	ShutdownGrace Duration `json:"shutdown_grace,omitempty"`
	// Concurrency is how many invocations run at once on this node. Zero
	// means 4 per CPU.
	Concurrency int `json:"concurrency,omitempty"`
	// CgroupReconcile says which leftover cgroups start-up removes after a
	// crash: "owned" (the zero value) removes only the cgroups of sandboxes
	// whose workspaces this daemon's state directory still holds (each
	// backend's own Reconcile does the same for its sandboxes), so a daemon
	// never kills another wovyr's live sandboxes — a second daemon's, a
	// `wovyr run`'s, a test run's; "all" removes everything below wovyr's
	// cgroup prefix, processes included, for a host where this daemon is
	// the only wovyr and leftovers of any state directory should go.
	CgroupReconcile string `json:"cgroup_reconcile,omitempty"`
	// Pools size the warm sandbox pools, most specific rule first
	// (backend+template, backend, template, then a rule naming neither).
	// Empty means one rule for everything: up to Concurrency live
	// sandboxes per pool, one kept warm while idle, up to 4 warm under
	// load.
	Pools []Pool `json:"pools,omitempty"`
	// WarmTimeout bounds how long start-up waits for every certified
	// backend's default pool to hold its min_warm sandboxes before the
	// daemon reports ready anyway (/readyz lists the pools short of it).
	// Zero means 2m.
	WarmTimeout Duration `json:"warm_timeout,omitempty"`
	// Egress turns on allowlisted egress for the native backend: a
	// per-sandbox network slot, DNS stub and checking proxy (package
	// egress). Off, every sandbox has no network at all and allowlists are
	// refused as unenforceable.
	Egress Egress `json:"egress,omitzero"`
	// Snapshots turns on golden snapshots where they are opt-in.
	Snapshots Snapshots `json:"snapshots,omitzero"`
	// GPU says where the node's GPUs come from (see gpu.go). Zero means
	// NVML, and no GPUs where the driver is absent.
	GPU GPU `json:"gpu,omitzero"`
	// MCP configures the MCP tools (see mcp.go).
	MCP MCP `json:"mcp,omitzero"`
	// Region is the node's region (and Zone its zone within it): operator
	// configuration, never taken from an invocation or a tenant. Its pools
	// are keyed by it and its records say it. Zero means no region: the
	// node takes no invocation that asks for one (residency-unmet).
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	// Node names this node in its cluster's registry. Zero means one
	// derived from the host name and the state directory.
	Node string `json:"node,omitempty"`
	// Residency is the deployment's regions and residency policy (see
	// region.go).
	Residency Residency `json:"residency,omitzero"`
	// NATS is how the node joins its cluster (see region.go).
	NATS NATS `json:"nats,omitzero"`
	// Plugins configures component plugins (see plugins.go).
	Plugins Plugins `json:"plugins,omitzero"`
	// Tenants are the callers. Empty is allowed only for Default, which the
	// serve command completes with a bootstrap tenant.
	Tenants []Tenant `json:"tenants"`
}

// Egress configures allowlisted egress.
type Egress struct {
	Enabled bool `json:"enabled,omitempty"`
	// Uplinks are the host interfaces CIDR-rule traffic may leave by;
	// empty means CIDR rules are refused and names go through the proxy.
	Uplinks []string `json:"uplinks,omitempty"`
	// Masquerade source-NATs traffic leaving by Uplinks.
	Masquerade bool `json:"masquerade,omitempty"`
	// ResolvConf names the host resolvers allowed names are looked up
	// with. Zero means /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf,omitempty"`
}

// Snapshots says which backends' pools fill with clones of golden
// snapshots where that is not the default. microVM pools always do (ADR
// 0018); wasm pre-initialises every module that exports an init (ADR
// 0019).
type Snapshots struct {
	// GVisor fills gVisor pools with clones restored from golden
	// snapshots (ADR 0020). Off by default: on the machines measured a
	// clone costs more than the cold prepare it replaces.
	GVisor bool `json:"gvisor,omitempty"`
}

// Pool sizes the warm pools of one backend and/or template ("" matches any).
type Pool struct {
	Backend  string `json:"backend,omitempty"`
	Template string `json:"template,omitempty"`
	// MaxLive bounds live sandboxes (warm and in use). Zero means Concurrency.
	MaxLive int `json:"max_live,omitempty"`
	// MinWarm and MaxWarm bound the autoscaled warm target.
	MinWarm int `json:"min_warm,omitempty"`
	MaxWarm int `json:"max_warm,omitempty"`
}

// Tenant is one caller of the API.
type Tenant struct {
	// Name is the tenant's name (sandbox.ValidTenant).
	Name string `json:"name"`
	// Weight is its share under contention. Zero means 1.
	Weight int `json:"weight,omitempty"`
	// TokenSHA256 lists the hex SHA-256 of each bearer token (HashToken).
	TokenSHA256 []string `json:"token_sha256"`
	// Admin lets the tenant's tokens certify and administer backends.
	Admin bool `json:"admin,omitempty"`
	// MaxPending bounds its queued plus running invocations; more is 429.
	// Zero means 1000.
	MaxPending int `json:"max_pending,omitempty"`
	// MaxRunning bounds how many of its invocations run at once. Zero
	// means no bound beyond the node's Concurrency.
	MaxRunning int `json:"max_running,omitempty"`
	// MaxSessions bounds its live sessions (creating and running); one
	// more is 429. Zero means 8.
	MaxSessions int `json:"max_sessions,omitempty"`
	// Rate is its sustained submissions per second and Burst the bucket
	// size; over it is 429 with Retry-After. Zero means 100/s and burst
	// 1000.
	Rate  float64 `json:"rate,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// Regions are the regions its invocations may run in (the default
	// residency policy reads them; a policy of the operator's may too).
	// Zero means every region of the deployment.
	Regions []string `json:"regions,omitempty"`
	// Attributes are facts about the tenant that the residency policy
	// reads (for example "jurisdiction": "eu").
	Attributes map[string]string `json:"attributes,omitempty"`
	// MaxGPUs bounds the GPU devices its running invocations hold at once;
	// a request for more is refused (400). Zero means no bound beyond the
	// node's devices.
	MaxGPUs int `json:"max_gpus,omitempty"`
}

// Default is the configuration used with no file: loopback only, no tenant
// yet (the serve command adds a bootstrap one), every default.
func Default() Config {
	c, _ := Config{}.WithDefaults()
	return c
}

// WithDefaults returns c with every zero field set to its default, and
// validated.
func (c Config) WithDefaults() (Config, error) {
	if len(c.Egress.Uplinks) == 0 {
		// "uplinks": [] means none, as an absent list does: one value, so
		// the config written back reads the same (FuzzParse).
		c.Egress.Uplinks = nil
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 96 << 20
	}
	if c.MaxWait == 0 {
		c.MaxWait = Duration(60 * time.Second)
	}
	if c.Retention == 0 {
		c.Retention = Duration(24 * time.Hour)
	}
	if c.PurgeEvery == 0 {
		c.PurgeEvery = Duration(10 * time.Minute)
	}
	if c.WarmTimeout == 0 {
		c.WarmTimeout = Duration(2 * time.Minute)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(10 * time.Second)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4 * runtime.NumCPU()
	}
	if c.CgroupReconcile == "" {
		c.CgroupReconcile = "owned"
	}
	if c.Egress.ResolvConf == "" {
		c.Egress.ResolvConf = "/etc/resolv.conf"
	}
	c.Egress.Uplinks = slices.Clone(c.Egress.Uplinks)
	mcp, err := c.MCP.withDefaults()
	if err != nil {
		return c, err
	}
	c.MCP = mcp
	if c.Plugins, err = c.Plugins.withDefaults(); err != nil {
		return c, err
	}
	c.Pools = slices.Clone(c.Pools)
	if len(c.Pools) == 0 {
		c.Pools = []Pool{{MinWarm: 1, MaxWarm: min(4, c.Concurrency)}}
	}
	for i := range c.Pools {
		if c.Pools[i].MaxLive == 0 {
			c.Pools[i].MaxLive = c.Concurrency
		}
	}
	c.regionDefaults()
	c.Tenants = slices.Clone(c.Tenants)
	for i := range c.Tenants {
		t := &c.Tenants[i]
		t.TokenSHA256 = slices.Clone(t.TokenSHA256)
		t.Regions = slices.Clone(t.Regions)
		if len(t.Regions) == 0 {
			t.Regions = nil
		}
		t.Attributes = maps.Clone(t.Attributes)
		if len(t.Attributes) == 0 {
			t.Attributes = nil
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
		if t.MaxPending == 0 {
			t.MaxPending = 1000
		}
		if t.MaxSessions == 0 {
			t.MaxSessions = 8
		}
		if t.Rate == 0 {
			t.Rate = 100
		}
		if t.Burst == 0 {
			t.Burst = 1000
		}
	}
	return c, c.validate()
}

func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return sandbox.Errorf(sandbox.BadInput, field, format, args...)
	}
	switch {
	case c.MaxBodyBytes < 1024:
		return bad("max_body_bytes", "must be at least 1024")
	case c.MaxWait < 0 || c.Retention < 0 || c.PurgeEvery <= 0 || c.ShutdownGrace < 0 || c.WarmTimeout < 0:
		return bad("max_wait", "durations must not be negative")
	case c.Concurrency < 0:
		return bad("concurrency", "must not be negative")
	case c.CgroupReconcile != "all" && c.CgroupReconcile != "owned":
		return bad("cgroup_reconcile", "want all or owned, not %q", c.CgroupReconcile)
	}
	if err := c.GPU.validate(); err != nil {
		return err
	}
	if err := c.validateRegion(); err != nil {
		return err
	}
	for i, p := range c.Pools {
		if p.MaxLive < 1 || p.MinWarm < 0 || p.MaxWarm < p.MinWarm || p.MaxWarm > p.MaxLive {
			return bad(fmt.Sprintf("pools[%d]", i), "want 0 <= min_warm <= max_warm <= max_live and max_live >= 1")
		}
	}
	names := map[string]bool{}
	hashes := map[string]string{}
	for i, t := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if !sandbox.ValidTenant(t.Name) {
			return bad(f+".name", "tenant name %q is not valid", t.Name)
		}
		if names[t.Name] {
			return bad(f+".name", "tenant %q listed twice", t.Name)
		}
		names[t.Name] = true
		if t.Weight < 0 || t.MaxPending < 0 || t.MaxRunning < 0 || t.MaxSessions < 0 || t.Rate < 0 || t.Burst < 0 || t.MaxGPUs < 0 {
			return bad(f, "weight, quotas and rates must not be negative")
		}
		if len(t.TokenSHA256) == 0 {
			return bad(f+".token_sha256", "tenant %q has no token", t.Name)
		}
		for _, h := range t.TokenSHA256 {
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size || h != strings.ToLower(h) {
				return bad(f+".token_sha256", "%q is not a lower-case hex SHA-256 (use wovyr serve --hash-token)", h)
			}
			if other, ok := hashes[h]; ok {
				return bad(f+".token_sha256", "a token is shared with tenant %q", other)
			}
			hashes[h] = t.Name
		}
	}
	return nil
}

// Load reads and validates the JSON file at path.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// MaxFileBytes bounds a configuration file.
const MaxFileBytes = 16 << 20

// Parse reads a JSON configuration strictly and returns it with defaults:
// one JSON object, nothing after it, at most MaxFileBytes.
func Parse(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return Config{}, err
	}
	if len(data) > MaxFileBytes {
		return Config{}, sandbox.Errorf(sandbox.BadInput, "", "the file exceeds %d bytes", MaxFileBytes)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Config{}, sandbox.Errorf(sandbox.BadInput, "", "want one JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return Config{}, sandbox.Wrap(sandbox.BadInput, err, "parse")
	}
	// Decode, not More: More calls a stray "}" or "]" the end.
	if dec.Decode(new(json.RawMessage)) != io.EOF {
		return Config{}, sandbox.Errorf(sandbox.BadInput, "", "trailing data after the JSON object")
	}
	return c.WithDefaults()
}

// Tenant returns the tenant called name.
func (c Config) Tenant(name string) (Tenant, bool) {
	for _, t := range c.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return Tenant{}, false
}

// WithTenant returns a copy of c with t added (defaults filled), validated.
func (c Config) WithTenant(t Tenant) (Config, error) {
	c.Tenants = append(slices.Clone(c.Tenants), t)
	return c.WithDefaults()
}

// HashToken is the form a token takes in a config file.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return errors.New("want a duration such as 30s or 24h")
	}
	*d = Duration(v)
	return nil
}
