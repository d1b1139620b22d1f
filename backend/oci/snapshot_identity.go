package oci

import (
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/snapshot"
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
	var err error
	if p := s.boot.paused; p != nil {
		s.boot.ident = *p.meta.Ident // the session's, kept across its pause
	} else if s.boot.ident, err = snapshot.NewIdentity(); err != nil {
		return err
	}
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
