package microvm

import (
	"context"
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
)

// ensureUser returns the uid and gid of the VMM account, creating it as a
// system user without a home or login shell if it does not exist. The
// account owns nothing: QEMU receives every file as a descriptor.
func ensureUser(ctx context.Context, name string) (uid, gid uint32, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		out, cerr := exec.CommandContext(ctx, "useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if cerr != nil {
			return 0, 0, fmt.Errorf("microvm: create user %s: %w: %s", name, cerr, strings.TrimSpace(string(out)))
		}
		if u, err = user.Lookup(name); err != nil {
			return 0, 0, fmt.Errorf("microvm: user %s: %w", name, err)
		}
	}
	id, err1 := strconv.ParseUint(u.Uid, 10, 32)
	g, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || id == 0 || g == 0 {
		return 0, 0, fmt.Errorf("microvm: user %s has uid %s gid %s; it must be unprivileged", name, u.Uid, u.Gid)
	}
	return uint32(id), uint32(g), nil
}
