package plugin

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// Signature failures. Each is the cause inside a bad-input error (the
// install request is refused and nothing is stored), so callers branch on
// them with errors.Is.
var (
	ErrUnsigned     error = sentinel("the manifest is not signed")
	ErrUnknownKey   error = sentinel("its signing key is not in the trust store")
	ErrBadSignature error = sentinel("the signature does not verify")
)

// sentinel is an error whose text names nothing of the host, so it may
// reach a tenant inside a typed error (sandbox.Public keeps such causes).
type sentinel string

func (e sentinel) Error() string  { return string(e) }
func (e sentinel) Public() string { return string(e) }

// withKey is a sentinel about one key: errors.Is finds the sentinel.
type withKey struct {
	err error
	key string
}

func (e *withKey) Error() string  { return fmt.Sprintf("%v (key %q)", e.err, e.key) }
func (e *withKey) Public() string { return e.Error() }
func (e *withKey) Unwrap() error  { return e.err }

// TrustStore holds the operator's plugin signing keys by id. The zero
// value trusts no key. It is immutable once made.
type TrustStore struct {
	keys map[string]ed25519.PublicKey
}

// NewTrustStore makes a store of keys by id.
func NewTrustStore(keys map[string]ed25519.PublicKey) (*TrustStore, error) {
	ts := &TrustStore{keys: map[string]ed25519.PublicKey{}}
	for id, k := range keys {
		if id == "" || len(k) != ed25519.PublicKeySize {
			return nil, sandbox.Errorf(sandbox.BadInput, "plugins.trust_keys", "key %q: an ed25519 public key is %d bytes, not %d", id, ed25519.PublicKeySize, len(k))
		}
		ts.keys[id] = k
	}
	return ts, nil
}

// SignedPayload is exactly what a manifest's signature covers: the
// component's digest and its capability list, canonical (sorted, each
// once), one per line, under a versioned header. The name and limits are
// left out on purpose: renaming a plugin or tightening its limits grants
// it nothing, and the operator who installs it chooses both.
func SignedPayload(m *Manifest) []byte {
	var b strings.Builder
	b.WriteString("wovyr plugin manifest v1\n")
	b.WriteString("component " + m.Component + "\n")
	for _, c := range m.capabilities() {
		b.WriteString("capability " + c + "\n")
	}
	return []byte(b.String())
}

// Sign sets m's signature by key id with priv.
func Sign(m *Manifest, id string, priv ed25519.PrivateKey) {
	m.Signature = &Signature{KeyID: id, Ed25519: ed25519.Sign(priv, SignedPayload(m))}
}

// Verify checks m's signature against the store. An absent signature is
// ErrUnsigned; callers decide whether m's trust class needs one (Check).
func (ts *TrustStore) Verify(m *Manifest) error {
	if m.Signature == nil {
		return ErrUnsigned
	}
	var k ed25519.PublicKey
	if ts != nil {
		k = ts.keys[m.Signature.KeyID]
	}
	if k == nil {
		return &withKey{ErrUnknownKey, m.Signature.KeyID}
	}
	if !ed25519.Verify(k, SignedPayload(m), m.Signature.Ed25519) {
		return &withKey{ErrBadSignature, m.Signature.KeyID}
	}
	return nil
}

// Check applies the trust rule: trusted and internal plugins need a valid
// signature; others may be unsigned, but a signature that is present must
// verify (a bad one is never ignored).
func (ts *TrustStore) Check(m *Manifest) error {
	err := ts.Verify(m)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnsigned) && m.Trust != sandbox.Trusted && m.Trust != sandbox.Internal:
		return nil
	case errors.Is(err, ErrUnsigned):
		return &sandbox.Error{Class: sandbox.BadInput, Field: "manifest.signature",
			Msg: fmt.Sprintf("%s plugins need a manifest signed by a key in the operator's trust store", m.Trust), Err: err}
	}
	return &sandbox.Error{Class: sandbox.BadInput, Field: "manifest.signature", Msg: "the manifest's signature is not valid", Err: err}
}
