package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// hostileTemplate writes a one-layer docker-save tarball of entries,
// imports it with image.Import (the path every operator image takes) as a
// fresh "wovyr-hostile.tmp-…" template of b and returns its name and a cleanup
// removing it.
func hostileTemplate(ctx context.Context, b *Backend, entries []*tar.Header, data map[string][]byte) (string, func(), error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			return "", nil, err
		}
		if d, ok := data[h.Name]; ok {
			if _, err := tw.Write(d); err != nil {
				return "", nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return "", nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "wovyr-hostile-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "image.tar")
	ref, err := name.NewTag("wovyr/hostile:latest")
	if err != nil {
		return "", nil, err
	}
	if err := tarball.WriteToFile(src, ref, img); err != nil {
		return "", nil, err
	}
	tmpl := hostileName()
	if err := image.Import(ctx, src, tmpl, b.imagesDir()); err != nil {
		return "", nil, err
	}
	return tmpl, func() { _ = image.Remove(b.imagesDir(), tmpl) }, nil
}

// rawTemplate creates template "wovyr-hostile.tmp-…" of b directly, as a
// builder (debootstrap for "base") leaves it: absolute symlinks kept. links
// maps paths in the root to symlink targets; dirs are made first.
func rawTemplate(b *Backend, dirs []string, links map[string]string) (string, func(), error) {
	tmpl := hostileName()
	root := image.RootFS(b.imagesDir(), tmpl)
	remove := func() { _ = image.Remove(b.imagesDir(), tmpl) }
	for _, d := range append([]string{""}, dirs...) {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			remove()
			return "", nil, err
		}
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			remove()
			return "", nil, err
		}
	}
	return tmpl, remove, nil
}

// probeMountTargets is row 16 (the CVE-2025-31133 family: runtimes that
// follow a symlinked mount target or /dev/null out of the root): templates
// whose mount targets are absolute symlinks to a host canary directory —
// /.wovyr (where the agent is mounted), /dev/null and /dev/shm, /dev/console,
// /proc, /workspace, and the whole /dev, /sys and /tmp. Prepare must fail or
// stay inside its root: the host writes nothing into the canary directory.
// wovyr's rootfs assembly refuses a non-directory at every mount target the
// template could hold, so most variants never reach the runtime; /dev/*
// does, under the runtime's own /dev tmpfs. (A masked path left unmasked by
// a lost /dev/null is row 43's.) Then the runtime itself gets the /dev/null
// symlink wovyr's spec never lets it see (devNullAttempt): a runtime that
// follows it fails the row, whatever wovyr's own defences.
func probeMountTargets(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "templates with /.wovyr, /dev/null, /dev/shm, /dev/console, /proc, /workspace, /dev, /sys, /tmp -> host canary; Prepare each; host checks the canary dir; then the runtime run directly on a root whose /dev/null -> a host canary file (CVE-2025-31133)"}
	dir, file, marker, cleanup, err := hostCanary()
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer cleanup()
	b := t.Backend.(*Backend)
	var prep []string
	for _, links := range []map[string]string{
		{".wovyr": dir},
		{"dev/null": file, "dev/shm": dir, "dev/console": file},
		{"proc": dir},
		{"workspace": dir},
		{"dev": dir},
		{"sys": dir},
		{"tmp": dir},
	} {
		dirs := []string{"etc"}
		if _, ok := links["dev"]; !ok {
			dirs = append(dirs, "dev")
		}
		tmpl, remove, err := rawTemplate(b, dirs, links)
		if err != nil {
			obs.Observed = err.Error()
			return obs
		}
		sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: tmpl})
		if err != nil {
			msg := err.Error()
			prep = append(prep, "failed: "+msg[max(0, len(msg)-120):])
		} else {
			prep = append(prep, "prepared")
			sb.Destroy(context.WithoutCancel(ctx))
		}
		remove()
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	got, _ := os.ReadFile(file)
	obs.Observed = fmt.Sprintf("%q; canary dir holds %v", prep, names)
	obs.Secure = slices.Equal(names, []string{"secret"}) && string(got) == marker
	d, err := b.chosen(ctx)
	if err != nil {
		obs.Observed += "; runtime: " + err.Error()
		obs.Secure = false
		return obs
	}
	raw, held := devNullAttempt(ctx, b, d)
	obs.Observed += "; the runtime itself, " + raw
	obs.Secure = obs.Secure && held
	return obs
}

// probeHostileImage is row 17: an image whose layer holds an absolute
// symlink, a device node, a fifo, setuid and setgid files and a hard link
// climbing out is imported (image.Import) and run: the link must be
// relative, the node and fifo gone, the set-id bits cleared, and the root
// mounted nosuid,nodev. A second layer with an entry climbing out of the
// root must be refused outright. The hard link, whose target climbs out,
// is dropped or lands inside the root. (Huge files: Import's MaxImportFile bound,
// package image's tests; a sandbox's own: row 52.)
func probeHostileImage(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "import and run an image with /abs -> /etc/hostname, char device 1:1, fifo, setuid/setgid files, hard link ../../etc/hostname; import one with ../ entries"}
	b := t.Backend.(*Backend)
	bb, err := os.ReadFile(filepath.Join(image.RootFS(b.imagesDir(), "busybox"), "bin", "busybox"))
	if err != nil {
		obs.Observed = "busybox template: " + err.Error()
		return obs
	}
	reg := func(name string, mode int64, size int) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(size)}
	}
	tmpl, remove, err := hostileTemplate(ctx, b, []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		reg("bin/busybox", 0o755, len(bb)),
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox"},
		reg("etc/hostname", 0o644, 5),
		{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/etc/hostname"},
		{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666},
		{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o666},
		reg("suid", 0o4755, 5),
		reg("sgid", 0o2755, 5),
		{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../../etc/hostname"},
	}, map[string][]byte{"bin/busybox": bb, "etc/hostname": []byte("evil\n"), "suid": []byte("evil\n"), "sgid": []byte("evil\n")})
	if err != nil {
		obs.Observed = "import: " + err.Error()
		return obs
	}
	defer remove()
	canaryDir, _, _, cleanup, err := hostCanary()
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer cleanup()
	escape := "import of ../ entries refused"
	if tm, rm, err := hostileTemplate(ctx, b, []*tar.Header{reg(up(canaryDir)+"/escaped", 0o644, 5)}, map[string][]byte{up(canaryDir) + "/escaped": []byte("evil\n")}); err == nil {
		escape = "import of ../ entries accepted"
		rm()
		_ = tm
	}
	_, escErr := os.Stat(filepath.Join(canaryDir, "escaped"))
	sb, err := t.Backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: tmpl})
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	ht := t
	ht.Image = tmpl
	res, err := sb.Run(ctx, shell(ht, `echo "link=$(readlink /abs)"; ls /mem /fifo 2>/dev/null; echo "modes=$(stat -c %a /suid /sgid | tr '\n' ' ')"; echo "hl=$(cat /hl)"; echo "rootopts=$(awk '$5=="/"{print $6}' /proc/self/mountinfo)"`))
	if err != nil {
		obs.Observed = err.Error()
		return obs
	}
	out := strings.TrimSpace(string(res.Stdout))
	obs.Observed = fmt.Sprintf("%s; nothing escaped: %v; inside %q", escape, escErr != nil, out)
	lines := strings.Split(out, "\n")
	if s, ok := sb.(*Sandbox); ok && s.b.gvisor && len(lines) == 4 {
		// The Sentry shows no mount flags on its root: judge the host
		// mount its gofer serves the files from instead.
		lines[3] = "rootopts=" + hostMountOpts(filepath.Join(s.dir, "rootfs"))
		obs.Observed += "; host root mount " + lines[3]
	}
	obs.Secure = res.Class == sandbox.OK && escErr != nil && len(lines) == 4 &&
		!strings.HasPrefix(lines[0], "link=/") && lines[0] != "link=" &&
		lines[1] == "modes=755 755 " && (lines[2] == "hl=evil" || lines[2] == "hl=") &&
		strings.Contains(lines[3], "nosuid") && strings.Contains(lines[3], "nodev")
	return obs
}

// up is a relative path climbing far above any root, to p.
func up(p string) string { return strings.Repeat("../", 24) + strings.TrimPrefix(p, "/") }

// hostileName names a probe's throw-away template; ".tmp-" makes
// image.Reconcile remove one a crash left behind.
func hostileName() string { return "wovyr-hostile.tmp-" + sandbox.NewID()[:10] }

// hostMountOpts returns the per-mount options of the host mount at mp, or
// "" if there is none.
func hostMountOpts(mp string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == mp {
			return f[5]
		}
	}
	return ""
}
