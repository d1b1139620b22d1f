package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"maps"

	"github.com/wovyr/wovyr/sandbox"
)

// Plugins configures the daemon's component plugins (package plugin).
type Plugins struct {
	// TrustKeys are the operator's plugin signing keys: key id to an
	// ed25519 public key (32 bytes, standard base64). A trusted or internal
	// plugin's manifest must be signed by one of them. Empty means none:
	// only untrusted or hostile plugins, unsigned, where their floor allows
	// (by default it does not: the host runs plugins at wasm strength).
	TrustKeys map[string]string `json:"trust_keys,omitempty"`
	// Fuel, Memory (bytes) and WallMS (milliseconds) are every plugin
	// call's defaults and caps; a manifest may only lower them. Zero means
	// 1e9 fuel, 64 MiB, 10 s.
	Fuel   uint64 `json:"fuel,omitempty"`
	Memory int64  `json:"memory,omitempty"`
	WallMS int64  `json:"wall_ms,omitempty"`
}

// Keys decodes TrustKeys.
func (p Plugins) Keys() (map[string]ed25519.PublicKey, error) {
	out := make(map[string]ed25519.PublicKey, len(p.TrustKeys))
	for id, k := range p.TrustKeys {
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil || len(b) != ed25519.PublicKeySize || id == "" {
			return nil, sandbox.Errorf(sandbox.BadInput, "plugins.trust_keys", "key %q must be a non-empty id and a base64 ed25519 public key (32 bytes)", id)
		}
		out[id] = b
	}
	return out, nil
}

func (p Plugins) withDefaults() (Plugins, error) {
	p.TrustKeys = maps.Clone(p.TrustKeys)
	if len(p.TrustKeys) == 0 {
		p.TrustKeys = nil // one form for none, so the config reads back the same
	}
	if _, err := p.Keys(); err != nil {
		return p, err
	}
	if p.Memory < 0 || p.WallMS < 0 {
		return p, sandbox.Errorf(sandbox.BadInput, "plugins", "plugin limits cannot be negative")
	}
	return p, nil
}
