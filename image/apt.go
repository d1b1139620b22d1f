package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// aptCacheDir holds, under the templates' directory, one built tree per
// package set: the recipes and `image build NAME --from base --apt …` copy
// from it, so a set is fetched and installed once per machine. Its name is
// no valid template name, so no template can shadow it.
const aptCacheDir = ".apt-cache"

// maxAptPackages bounds one package set.
const maxAptPackages = 64

// aptPackageRE is a Debian package name (Debian Policy §5.6.1).
var aptPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// ErrBadPackage is a package list BuildApt refuses before doing anything.
var ErrBadPackage = errors.New("image: bad package list")

// BuildApt creates template name under dir: Debian bookworm minbase
// (debootstrap, as the base template) with pkgs and what they depend on.
// The tree of each package set is built once per machine into a cache
// (keyed by the sorted set) and copied from there, so a second template of
// the same set, under any name, takes seconds. Progress lines go to
// progress (nil: discarded).
func BuildApt(ctx context.Context, name, dir string, pkgs []string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	return buildApt(ctx, name, dir, pkgs, nil, progress)
}

// buildApt is BuildApt whose template gets warm-up argv (none if nil)
// before it appears.
func buildApt(ctx context.Context, name, dir string, pkgs, warmup []string, progress io.Writer) error {
	set, err := aptSet(pkgs)
	if err != nil {
		return err
	}
	if !ValidName(name) {
		return fmt.Errorf("image: invalid template name %q", name)
	}
	if Exists(dir, name) {
		return fmt.Errorf("%w: %s", ErrExists, name)
	}
	tree, err := aptTree(ctx, dir, set, progress)
	if err != nil {
		return err
	}
	return install(ctx, dir, name, func(root string) error {
		fmt.Fprintf(progress, "%s: copying the cached tree of [%s]\n", name, strings.Join(set, " "))
		if err := copyTree(ctx, tree, root); err != nil {
			return err
		}
		if warmup != nil {
			return writeWarmup(filepath.Dir(root), warmup)
		}
		return nil
	})
}

// aptSet validates pkgs and returns them sorted, without repeats.
func aptSet(pkgs []string) ([]string, error) {
	if len(pkgs) > maxAptPackages {
		return nil, fmt.Errorf("%w: %d packages (at most %d)", ErrBadPackage, len(pkgs), maxAptPackages)
	}
	set := slices.Clone(pkgs)
	for _, p := range set {
		if !aptPackageRE.MatchString(p) {
			return nil, fmt.Errorf("%w: %q is not a Debian package name", ErrBadPackage, p)
		}
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

// aptTree returns the cached root filesystem of set, building it first if
// the cache lacks it. A build goes to a temporary sibling and is renamed
// into place, so a half-built tree is never used (Reconcile removes it).
func aptTree(ctx context.Context, dir string, set []string, progress io.Writer) (string, error) {
	sum := sha256.Sum256([]byte(strings.Join(set, "\n")))
	cache := filepath.Join(dir, aptCacheDir)
	final := filepath.Join(cache, hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(filepath.Join(final, "rootfs")); err == nil && fi.IsDir() {
		return filepath.Join(final, "rootfs"), nil
	}
	// The templates' directory first, and its missing ancestors, as
	// Import makes them (0711: sandbox uids traverse them to their
	// bundles); only the cache itself is root's alone.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	if err := os.Mkdir(cache, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, filepath.Base(final)+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone once renamed; the leftovers of a failure otherwise
	root := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if err := debootstrap(ctx, root, progress, set...); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "packages"), []byte(strings.Join(set, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build of the same set won the race: use its tree.
		if _, serr := os.Stat(filepath.Join(final, "rootfs")); serr != nil {
			return "", fmt.Errorf("image: cache [%s]: %w", strings.Join(set, " "), err)
		}
	}
	return filepath.Join(final, "rootfs"), nil
}

// copyTree copies the tree src into the empty directory dst, keeping
// owners, modes, links and times (cp -a; reflinks where the filesystem
// has them).
func copyTree(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", src+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("image: copy %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}
