package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Identity is what makes a restored sandbox its own beside its RNG: every
// clone of one golden would otherwise read the golden boot's boot_id and
// the template's machine-id. Fresh per clone; kept across a tenant's pause
// and resume, as a machine's would be.
type Identity struct {
	MachineID string `json:"machine_id"` // 32 lowercase hex digits
	BootID    string `json:"boot_id"`    // a version 4 UUID, as the kernel writes it
}

// NewIdentity draws a fresh Identity from crypto/rand.
func NewIdentity() (Identity, error) {
	var r [32]byte
	if _, err := rand.Read(r[:]); err != nil {
		return Identity{}, fmt.Errorf("snapshot: identity: %w", err)
	}
	id := r[16:]
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	u := hex.EncodeToString(id)
	return Identity{MachineID: hex.EncodeToString(r[:16]), BootID: u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:32]}, nil
}
