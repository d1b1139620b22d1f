package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/wovyr/wovyr/cert"
)

// Key identifies a golden snapshot. Two goldens with the same Key are
// interchangeable; a changed field voids the old one.
type Key struct {
	Backend    string `json:"backend"`
	Version    string `json:"version"`     // the runtime's (certification key)
	Kernel     string `json:"kernel"`      // the host kernel release
	ConfigHash string `json:"config_hash"` // the backend's (certification key)
	Template   string `json:"template"`    // the template's digest: its image and shape
}

// ID is the Key's digest, the golden's directory name.
func (k Key) ID() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %q", k.Backend, k.Version, k.Kernel, k.ConfigHash, k.Template)
	return hex.EncodeToString(h.Sum(nil))[:24]
}

var backendRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

func (k Key) validate() error {
	switch {
	case !backendRE.MatchString(k.Backend):
		return fmt.Errorf("snapshot: backend %q must match %s", k.Backend, backendRE)
	case k.Version == "" || k.ConfigHash == "" || k.Template == "":
		return fmt.Errorf("snapshot: a key needs a version, a config hash and a template digest")
	}
	return nil
}

// Current is a Reconcile keep func: the goldens keyed to this runtime
// version and config hash on this node's kernel (cert.Kernel, as the
// backend's certification is).
func Current(version, configHash string) func(Key) bool {
	kernel := cert.Kernel()
	return func(k Key) bool { return k.Version == version && k.ConfigHash == configHash && k.Kernel == kernel }
}
