package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// Manifest is what an operator installs beside a component: its name, the
// digest of the exact component bytes, the trust class it runs under, and
// the interfaces it is granted. The signature, when present, covers the
// digest and the capability list (see SignedPayload).
type Manifest struct {
	// Name is how callers address the plugin: 1–63 of [a-z0-9-], starting
	// with a letter.
	Name string `json:"name"`
	// Component is "sha256:HEX" of the component's bytes.
	Component string `json:"component"`
	// Trust is the plugin's trust class. trusted and internal need a valid
	// signature from the operator's trust store; its floor decides where it
	// may run (the in-process host is wasm strength).
	Trust sandbox.TrustClass `json:"trust"`
	// Capabilities are the interfaces the plugin is granted, e.g.
	// "wasi:random/random" (any 0.2 version) or "wasi:random/random@0.2.0".
	// Zero means none: the component may import nothing.
	Capabilities []string `json:"capabilities,omitempty"`
	// Limits bound each call; zero fields take the host's defaults, and no
	// field may exceed the host's caps.
	Limits Limits `json:"limits,omitzero"`
	// Signature is the ed25519 signature, or nil when unsigned.
	Signature *Signature `json:"signature,omitempty"`
}

// Signature is an ed25519 signature over SignedPayload by the trust store's
// key KeyID.
type Signature struct {
	KeyID   string `json:"key_id"`
	Ed25519 []byte `json:"ed25519"` // 64 bytes; base64 in JSON
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Digest is the manifest form of wasm's digest: "sha256:HEX".
func Digest(wasm []byte) string {
	h := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(h[:])
}

// ParseManifest decodes and validates a manifest. Unknown fields are
// refused, so a misspelt grant cannot silently grant nothing.
func ParseManifest(b []byte) (*Manifest, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	var m Manifest
	if err := d.Decode(&m); err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, sandbox.Errorf(sandbox.BadInput, "manifest", "not a valid manifest: %v", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's own fields (not the component or the
// signature, which need the bytes and the trust store).
func (m *Manifest) Validate() error {
	if !nameRE.MatchString(m.Name) {
		return sandbox.Errorf(sandbox.BadInput, "manifest.name", "plugin name %q must be 1-63 of a-z, 0-9 and '-', starting with a letter", m.Name)
	}
	hexPart, ok := strings.CutPrefix(m.Component, "sha256:")
	if b, err := hex.DecodeString(hexPart); !ok || err != nil || len(b) != sha256.Size {
		return sandbox.Errorf(sandbox.BadInput, "manifest.component", "component digest %q must be sha256:<64 hex digits>", m.Component)
	}
	if !m.Trust.Valid() {
		return sandbox.Errorf(sandbox.BadInput, "manifest.trust", "a manifest must name its trust class (trusted, internal, untrusted, hostile)")
	}
	for i, c := range m.Capabilities {
		if err := grantable(c); err != nil {
			return sandbox.Errorf(sandbox.BadInput, "manifest.capabilities["+itoa(i)+"]", "%v", err)
		}
	}
	if m.Signature != nil && (m.Signature.KeyID == "" || len(m.Signature.Ed25519) != 64) {
		return sandbox.Errorf(sandbox.BadInput, "manifest.signature", "a signature needs key_id and a 64-byte ed25519 value")
	}
	return m.Limits.validate("manifest.limits")
}

// capabilities returns the grant list in its canonical form: sorted, each
// once.
func (m *Manifest) capabilities() []string {
	c := slices.Clone(m.Capabilities)
	slices.Sort(c)
	return slices.Compact(c)
}
