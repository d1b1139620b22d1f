package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/vmimage"
)

// imageMain is `wovyr image build NAME [--from base --apt PKG,…] | import
// SRC NAME | pull REF NAME | list | rm NAME | warmup NAME [-- ARGV...]`:
// root filesystem templates for the container, gvisor and microvm
// backends, under <state>/images. A template's warm-up (image.WarmupFile)
// runs in each of its warm sandboxes before any tenant.
func imageMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wovyr image build NAME (%v or microvm) | import SRC NAME | pull REF NAME | list | rm NAME\n"+
			"       wovyr image build NAME --from base --apt PKG,...   Debian bookworm with these packages (cached per package set)\n"+
			"       wovyr image warmup NAME [-- ARGV...]   print, set (or with nothing after --, clear) the template's warm-up\n", image.Builders)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	dir := filepath.Join(g.stateDir, "images")
	a := fs.Args()
	if len(a) == 0 {
		fs.Usage()
		return exitUsage
	}
	if a[0] != "list" && !(a[0] == "warmup" && len(a) == 2) {
		// Templates are root-owned trees the root-run backends mount.
		if code := refuseUnlessRoot("wovyr image " + a[0]); code != 0 {
			return code
		}
	}
	// Progress on a TTY; quiet otherwise (errors still say why).
	var progress io.Writer
	if term.IsTerminal(int(os.Stderr.Fd())) {
		progress = os.Stderr
	}
	var err error
	switch {
	case a[0] == "build" && len(a) > 2:
		err = buildFrom(ctx, dir, a[1], a[2:], progress)
	case a[0] == "build" && len(a) == 2:
		if a[1] == "microvm" {
			// The VM image: guest kernel, initramfs with the agent (the
			// --guest binary, as the battery's), and the workload root disk.
			_, err = microvm.BuildImage(ctx, g.stateDir, vmimage.Options{Guest: g.guest})
			break
		}
		err = image.Build(ctx, a[1], dir, progress)
	case a[0] == "import" && len(a) == 3:
		err = image.Import(ctx, a[1], a[2], dir)
	case a[0] == "pull" && len(a) == 3:
		err = image.Pull(ctx, a[1], a[2], dir)
	case a[0] == "list" && len(a) == 1:
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if image.Exists(dir, e.Name()) {
				fmt.Println(e.Name())
			}
		}
	case a[0] == "rm" && len(a) == 2:
		err = image.Remove(dir, a[1])
	case a[0] == "warmup" && len(a) == 2:
		var argv []string
		if argv, err = image.Warmup(dir, a[1]); err == nil && argv != nil {
			fmt.Printf("%q\n", argv)
		}
	case a[0] == "warmup" && len(a) >= 3 && a[2] == "--":
		err = image.SetWarmup(dir, a[1], a[3:])
	default:
		fs.Usage()
		return exitUsage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr image:", err)
		if errors.Is(err, image.ErrExists) || errors.Is(err, image.ErrNotFound) || errors.Is(err, image.ErrBadWarmup) ||
			errors.Is(err, image.ErrBadPackage) || errors.Is(err, image.ErrBadRef) || errors.Is(err, errBadBuild) {
			return exitBadInput
		}
		return exitBackendFailure
	}
	return 0
}

// errBadBuild is a build command line that names no recipe.
var errBadBuild = errors.New("build flags")

// buildFrom is `image build NAME --from base --apt PKG,…`: bookworm minbase
// with the packages (image.BuildApt).
func buildFrom(ctx context.Context, dir, name string, args []string, progress io.Writer) error {
	fs := flag.NewFlagSet("image build", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the template to start from: base (Debian bookworm minbase)")
	apt := fs.String("apt", "", "comma-separated Debian packages to install")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v (want --from base --apt PKG,...)", errBadBuild, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected %q (want --from base --apt PKG,...)", errBadBuild, fs.Arg(0))
	}
	if *from != "base" {
		return fmt.Errorf("%w: --from %q: only base (Debian bookworm minbase) takes --apt packages", errBadBuild, *from)
	}
	var pkgs []string
	for _, p := range strings.Split(*apt, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pkgs = append(pkgs, p)
		}
	}
	return image.BuildApt(ctx, name, dir, pkgs, progress)
}
