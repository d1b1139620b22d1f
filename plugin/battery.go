package plugin

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/sandbox"
)

// weakness is one property of the host switched off, for a battery row's
// positive control only: the same probe must see it missing.
type weakness int

const (
	weakNone             weakness = iota
	weakNoImportCheck             // components load whatever they import
	weakKeepFailed                // a failed call's instance serves the next
	weakNoSignatureCheck          // a manifest's signature is not checked
	weakUnmetered                 // calls run without fuel
	weakNoMemoryLimit             // instances grow to the pool's 1 GiB
	weakSharedInstances           // idle instances are shared by all tenants
)

// BatteryComponents are the components the battery's probes run: calc,
// rand and tally as plugin/testdata builds them (calc.wit, rand.wit,
// tally.wit).
type BatteryComponents struct {
	Calc, Rand, Tally []byte
}

type hostProbe struct {
	id    int
	weak  weakness
	tried string
	calc  bool // calc is loaded before run
	run   func(ctx context.Context, h *Host, key ed25519.PrivateKey, c BatteryComponents) (observed string, secure bool)
}

// batteryKey signs the probes' manifests; the probes' hosts trust it alone.
var batteryKey = ed25519.NewKeyFromSeed([]byte("wovyr plugin battery probe key!!"))

// Battery runs the plugin host's battery rows (BATTERY.md 99–105, letter
// P): each probe on a host made from cfg (its Trust replaced by the
// probes' own key, its Dir kept for the compiled components), and its
// positive control on the same configuration with the row's one property
// switched off, which the probe must flag.
func Battery(ctx context.Context, cfg Config, c BatteryComponents) ([]cert.Outcome, error) {
	names := map[int]string{}
	for _, r := range battery.Catalogue() {
		if r.Backends == "P" {
			names[r.ID] = r.Name
		}
	}
	ts, err := NewTrustStore(map[string]ed25519.PublicKey{"battery": batteryKey.Public().(ed25519.PublicKey)})
	if err != nil {
		return nil, err
	}
	cfg.Trust = ts
	run := func(p hostProbe, weak weakness) (battery.Observation, error) {
		cfg := cfg
		cfg.weak = weak
		h, err := NewHost(cfg)
		if err != nil {
			return battery.Observation{}, err
		}
		defer h.Close()
		o := battery.Observation{Tried: p.tried}
		if p.calc {
			if _, err := h.Load(probeManifest("calc", c.Calc, batteryKey), c.Calc); err != nil {
				o.Observed = "load: " + err.Error()
				return o, nil
			}
		}
		o.Observed, o.Secure = p.run(ctx, h, batteryKey, c)
		return o, nil
	}
	var out []cert.Outcome
	for _, p := range hostProbes {
		o := cert.Outcome{ID: p.id, Name: names[p.id], Applies: true}
		obs, err := run(p, weakNone)
		if err != nil {
			return nil, err
		}
		ctl, err := run(p, p.weak)
		if err != nil {
			return nil, err
		}
		o.Tried, o.Observed, o.Pass = obs.Tried, obs.Observed, obs.Secure
		o.ControlObserved, o.ControlFlagged = ctl.Observed, !ctl.Secure
		out = append(out, o)
	}
	return out, nil
}

// probeManifest is a manifest for wasm named name, signed by key.
func probeManifest(name string, wasm []byte, key ed25519.PrivateKey, caps ...string) *Manifest {
	m := &Manifest{Name: name, Component: Digest(wasm), Trust: sandbox.Internal, Capabilities: caps,
		Limits: Limits{Fuel: 10_000_000, Memory: 16 << 20, WallMS: 2000}}
	Sign(m, "battery", key)
	return m
}

// calls runs fn of plugin name for each tenant in turn and writes what
// came back: the value, or how it ended, or the error.
func calls(ctx context.Context, h *Host, name string, steps ...[3]string) string {
	var b []string
	for _, s := range steps {
		r, err := h.Call(ctx, s[0], name, s[1], json.RawMessage(s[2]), CallOptions{})
		switch {
		case err != nil:
			b = append(b, s[1]+": error: "+err.Error())
		case r.End != "ok":
			b = append(b, s[1]+": "+r.End)
		default:
			b = append(b, s[1]+": "+string(r.Value))
		}
	}
	return strings.Join(b, "; ")
}

var hostProbes = []hostProbe{
	{99, weakNoImportCheck, "load rand, which imports wasi:random/random@0.2.0, under a manifest granting nothing; call roll", false,
		func(ctx context.Context, h *Host, key ed25519.PrivateKey, c BatteryComponents) (string, bool) {
			_, err := h.Load(probeManifest("rand", c.Rand, key), c.Rand)
			if errors.Is(err, ErrUngranted) && strings.Contains(err.Error(), "wasi:random/random@0.2.0") {
				return "refused at load: " + err.Error(), true
			}
			return fmt.Sprintf("load: %v; %s", err, calls(ctx, h, "rand", [3]string{"t", "roll", ""})), false
		}},
	{100, weakKeepFailed, "count twice on one instance, trap it (crash), then count again", true,
		func(ctx context.Context, h *Host, _ ed25519.PrivateKey, _ BatteryComponents) (string, bool) {
			got := calls(ctx, h, "calc", [3]string{"t", "counter", ""}, [3]string{"t", "counter", ""},
				[3]string{"t", "crash", ""}, [3]string{"t", "counter", ""})
			return got, got == "counter: 1; counter: 2; crash: trap; counter: 1"
		}},
	{101, weakNoSignatureCheck, "load calc as internal: unsigned; signed by a stranger's key under the trusted key's id; signed, then granted wasi:random/random after signing", false,
		func(ctx context.Context, h *Host, key ed25519.PrivateKey, c BatteryComponents) (string, bool) {
			unsigned := probeManifest("calc", c.Calc, key)
			unsigned.Signature = nil
			_, other, _ := ed25519.GenerateKey(nil)
			widened := probeManifest("calc", c.Calc, key)
			widened.Capabilities = append(widened.Capabilities, "wasi:random/random")
			var seen []string
			secure := true
			for _, m := range []*Manifest{unsigned, probeManifest("calc", c.Calc, other), widened} {
				_, err := h.Load(m, c.Calc)
				seen = append(seen, fmt.Sprint(err))
				secure = secure && sandbox.ClassOf(err) == sandbox.BadInput &&
					(errors.Is(err, ErrUnsigned) || errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrBadSignature))
			}
			return strings.Join(seen, "; "), secure
		}},
	{102, weakUnmetered, "spin forever under 10,000,000 fuel and a 2 s deadline", true,
		func(ctx context.Context, h *Host, _ ed25519.PrivateKey, _ BatteryComponents) (string, bool) {
			r, err := h.Call(ctx, "t", "calc", "spin", json.RawMessage(`[0]`), CallOptions{})
			if err != nil {
				return "error: " + err.Error(), false
			}
			return fmt.Sprintf("%s after %d fuel: %s", r.End, r.FuelUsed, r.Error), r.End == "out-of-fuel" && r.FuelUsed == 10_000_000
		}},
	{103, weakNoMemoryLimit, "grow linear memory by 512 pages (32 MiB) under a 16 MiB limit", true,
		func(ctx context.Context, h *Host, _ ed25519.PrivateKey, _ BatteryComponents) (string, bool) {
			got := calls(ctx, h, "calc", [3]string{"t", "grow", "[512]"})
			return got, got == "grow: -1"
		}},
	{104, weakSharedInstances, "tenant a counts twice, then tenant b counts", true,
		func(ctx context.Context, h *Host, _ ed25519.PrivateKey, _ BatteryComponents) (string, bool) {
			got := calls(ctx, h, "calc", [3]string{"a", "counter", ""}, [3]string{"a", "counter", ""}, [3]string{"b", "counter", ""})
			return got, got == "counter: 1; counter: 2; counter: 1"
		}},
	{105, weakSharedInstances, "tenant a makes a counter (a resource) and reads it; tenant b reads it, then takes it, by a's handle", false,
		func(ctx context.Context, h *Host, key ed25519.PrivateKey, c BatteryComponents) (string, bool) {
			if _, err := h.Load(probeManifest("tally", c.Tally, key), c.Tally); err != nil {
				return "load: " + err.Error(), false
			}
			const iface = "wovyr:test/counters#"
			r, err := h.Call(ctx, "a", "tally", iface+"[constructor]counter", json.RawMessage(`{"start": 41}`), CallOptions{})
			if err != nil || r.End != "ok" {
				return fmt.Sprintf("constructor: %v %+v", err, r), false
			}
			self := `{"self": ` + string(r.Value) + `}`
			got := calls(ctx, h, "tally", [3]string{"a", iface + "[method]counter.value", self},
				[3]string{"b", iface + "[method]counter.value", self}, [3]string{"b", iface + "finish", `{"c": ` + string(r.Value) + `}`},
				[3]string{"a", iface + "[method]counter.value", self})
			secure := strings.Count(got, "error: bad-input (args.") == 2 && strings.Count(got, ": 41") == 2
			return got, secure
		}},
}
