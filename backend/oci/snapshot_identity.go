package oci

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// machineIDPath is where systemd and D-Bus look for the machine's id.
const machineIDPath = "/etc/machine-id"

// identityMounts gives a golden or clone its own boot_id and machine-id:
// files under its scratch, bound read-only over the Sentry's boot_id (the
// one of the boot the golden's Sentry made, which every clone would share)
// and over /etc/machine-id. A restore re-attaches each mount to the
// clone's spec, so every clone reads its own; no process inside can write
// them (read-only binds, host files of root) or unmount them (no
// capabilities).
func (s *Sandbox) identityMounts(spec *specs.Spec) error {
	dir := filepath.Join(s.dir, "identity")
	if err := os.Mkdir(dir, 0o711); err != nil {
		return err
	}
	var r [32]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	s.boot.ident = sandboxIdentity{BootID: uuid4(r[:16]), MachineID: hex.EncodeToString(r[16:])}
	for _, f := range []struct{ name, dst, text string }{
		{"boot_id", bootIDPath, s.boot.ident.BootID},
		{"machine-id", machineIDPath, s.boot.ident.MachineID},
	} {
		src := filepath.Join(dir, f.name)
		if err := os.WriteFile(src, []byte(f.text+"\n"), 0o444); err != nil {
			return err
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: f.dst, Type: "bind", Source: src,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return nil
}

// uuid4 formats 16 random bytes as a version 4 UUID, as the kernel writes
// boot_id.
func uuid4(b []byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	u := hex.EncodeToString(b)
	return u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:32]
}
