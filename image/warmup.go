package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WarmupFile holds a template's warm-up command, next to its rootfs: a
// JSON array of argv, run once in every warm sandbox of the template after
// its agent answers and before any tenant (so inside every golden
// snapshot), to leave behind what a tool's first run would otherwise pay
// for — an interpreter's modules paged in, say. It is the template's,
// declared by whoever installed it; no tenant input reaches it.
const WarmupFile = "warmup"

// maxWarmup bounds a warm-up command's encoded size.
const maxWarmup = 4096

// ErrBadWarmup is returned for a warm-up command that cannot be one.
var ErrBadWarmup = errors.New("image: bad warm-up command")

// builtinWarmups are the warm-ups Build gives its templates.
var builtinWarmups = map[string][]string{
	"python": {"python3", "-c", "import json, re, subprocess"},
}

// Warmup is template name's warm-up command, nil when it declares none.
func Warmup(dir, name string) ([]string, error) {
	if !ValidName(name) || !Exists(dir, name) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, name, WarmupFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image: template %s: %w", name, err)
	}
	var argv []string
	if err := json.Unmarshal(b, &argv); err != nil {
		return nil, fmt.Errorf("image: template %s: malformed %s file: %w", name, WarmupFile, err)
	}
	if err := checkWarmup(argv); err != nil {
		return nil, fmt.Errorf("image: template %s: %w", name, err)
	}
	return argv, nil
}

// SetWarmup declares argv as template name's warm-up command; an empty
// argv removes it. The file is replaced whole (a rename), so a sandbox
// preparing meanwhile reads the old command or the new one. Anything keyed
// by the template (golden snapshots) must cover WarmupDigest.
func SetWarmup(dir, name string, argv []string) error {
	if !ValidName(name) || !Exists(dir, name) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	path := filepath.Join(dir, name, WarmupFile)
	if len(argv) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeWarmup(filepath.Join(dir, name), argv)
}

func writeWarmup(tmplDir string, argv []string) error {
	if err := checkWarmup(argv); err != nil {
		return err
	}
	b, _ := json.Marshal(argv)
	tmp := filepath.Join(tmplDir, WarmupFile+".new")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(tmplDir, WarmupFile))
}

func checkWarmup(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: empty argv", ErrBadWarmup)
	}
	n := 0
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: an argument holds a NUL byte", ErrBadWarmup)
		}
		n += len(a) + 1
	}
	if n > maxWarmup {
		return fmt.Errorf("%w: %d bytes, over %d", ErrBadWarmup, n, maxWarmup)
	}
	return nil
}

// WarmupDigest names a warm-up command for keys: "" for none.
func WarmupDigest(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	b, _ := json.Marshal(argv)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
