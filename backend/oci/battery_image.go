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
// fresh "wovyr-hostile-…" template of b and returns its name and a cleanup
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
	tmpl := "wovyr-hostile-" + sandbox.NewID()[:10]
	if err := image.Import(ctx, src, tmpl, b.imagesDir()); err != nil {
		return "", nil, err
	}
	return tmpl, func() { _ = image.Remove(b.imagesDir(), tmpl) }, nil
}

// rawTemplate creates template "wovyr-hostile-…" of b directly, as a
// builder (debootstrap for "base") leaves it: absolute symlinks kept. links
// maps paths in the root to symlink targets; dirs are made first.
func rawTemplate(b *Backend, dirs []string, links map[string]string) (string, func(), error) {
	tmpl := "wovyr-hostile-" + sandbox.NewID()[:10]
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

// probeMountTargets is row 16: templates whose mount targets are absolute
// symlinks to a host canary directory — /.wovyr (where the agent is
// mounted), /dev/null, /dev/shm. Prepare must fail or stay inside its
// root: the host writes nothing into the canary directory.
func probeMountTargets(ctx context.Context, t battery.Target) battery.Observation {
	obs := battery.Observation{Tried: "templates with /.wovyr, /dev/null, /dev/shm -> host canary; Prepare each; host checks the canary dir"}
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
		{"dev/null": file, "dev/shm": dir},
	} {
		tmpl, remove, err := rawTemplate(b, []string{"etc", "dev"}, links)
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
	return obs
}
