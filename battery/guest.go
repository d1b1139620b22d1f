package battery

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// StageGuest copies the static wovyr-guest binary at src into a fresh
// directory that every sandbox uid can read and execute, and returns its
// path and a cleanup function. Native sandboxes run it from there; other
// backends mount it into their root filesystems.
func StageGuest(src string) (string, func(), error) {
	in, err := os.Open(src)
	if err != nil {
		return "", nil, err
	}
	defer in.Close()
	dir, err := os.MkdirTemp("", "wovyr-guest-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o755); err != nil {
		cleanup()
		return "", nil, err
	}
	dst := filepath.Join(dir, "wovyr-guest")
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		cleanup()
		return "", nil, fmt.Errorf("stage guest: %w", err)
	}
	if err := out.Close(); err != nil {
		cleanup()
		return "", nil, err
	}
	return dst, cleanup, nil
}
