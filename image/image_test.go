package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// hostileLayer is a layer written by an attacker.
func hostileLayer(t *testing.T, traversal bool) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(body))
		}
	}
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o755}, "#!/bin/sh\necho ok\n")
	add(&tar.Header{Name: "bin/suid", Typeflag: tar.TypeReg, Mode: 0o4755}, "x")
	if traversal {
		add(&tar.Header{Name: "../../escape", Typeflag: tar.TypeReg, Mode: 0o644}, "pwned")
	}
	add(&tar.Header{Name: "/abs/../../escape2", Typeflag: tar.TypeReg, Mode: 0o644}, "pwned")
	add(&tar.Header{Name: "etc/evil", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}, "")
	add(&tar.Header{Name: "dev/mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}, "")
	add(&tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "../../../etc/passwd"}, "")
	add(&tar.Header{Name: "big-uid", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 1 << 30}, "u")
	tw.Close()
	return buf.Bytes()
}

func hostileImage(t *testing.T, traversal bool) v1.Image {
	lb := hostileLayer(t, traversal)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lb)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImportRejectsTraversal(t *testing.T) {
	work := t.TempDir()
	saved := filepath.Join(work, "save.tar")
	tag, _ := name.NewTag("hostile:latest")
	if err := tarball.WriteToFile(saved, tag, hostileImage(t, true)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(work, "images")
	if err := Import(context.Background(), saved, "hostile", dir); err == nil {
		t.Fatal("a layer with ../../escape was imported")
	}
	if Exists(dir, "hostile") {
		t.Fatal("rejected import left a template")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
	if _, err := os.Stat(filepath.Join(work, "escape")); err == nil {
		t.Error("traversal wrote outside")
	}
}

func TestImportNeutralisesHostileEntries(t *testing.T) {
	img := hostileImage(t, false)
	work := t.TempDir()
	saved := filepath.Join(work, "save.tar")
	tag, _ := name.NewTag("hostile:latest")
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	lay, err := layout.Write(filepath.Join(work, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lay.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	for src, label := range map[string]string{saved: "docker-save", filepath.Join(work, "layout"): "oci-layout"} {
		t.Run(label, func(t *testing.T) {
			dir := filepath.Join(work, "images-"+label)
			if err := Import(context.Background(), src, "hostile", dir); err != nil {
				t.Fatal(err)
			}
			checkNeutralised(t, work, dir)
		})
	}
}

// checkNeutralised checks what the defences made of hostileImage(false),
// installed as template "hostile" under dir in work.
func checkNeutralised(t *testing.T, work, dir string) {
	t.Helper()
	root := RootFS(dir, "hostile")
	if b, err := os.ReadFile(filepath.Join(root, "bin/tool")); err != nil || string(b) != "#!/bin/sh\necho ok\n" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "bin/suid")); fi == nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("setuid bit kept: %v", fi)
	}
	if b, err := os.ReadFile(filepath.Join(root, "escape2")); err != nil || string(b) != "pwned" {
		t.Errorf("/abs/../../escape2 should land at the root as escape2: %q %v", b, err)
	}
	for _, p := range []string{filepath.Join(work, "escape2"), filepath.Join(dir, "escape2"), filepath.Join(dir, "hostile", "escape2")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("traversal wrote %s", p)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "etc/evil")); err != nil || filepath.IsAbs(l) || l != "shadow" {
		t.Errorf("absolute symlink: %q %v, want shadow (relative to etc/)", l, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "dev/mem")); err == nil {
		t.Error("device node created")
	}
	if _, err := os.Lstat(filepath.Join(root, "hard")); err == nil {
		t.Error("hard link out of the root created")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "big-uid"), &st); err != nil || st.Uid != 65534 {
		t.Errorf("owner of an out-of-range uid: %d %v, want 65534", st.Uid, err)
	}
}

func TestBuildBusybox(t *testing.T) {
	dir := t.TempDir()
	if err := Build(context.Background(), "busybox", dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(RootFS(dir, "busybox"), "bin/sh")); err != nil || l != "/bin/busybox" {
		t.Fatalf("bin/sh -> %q %v", l, err)
	}
	if err := Build(context.Background(), "busybox", dir, io.Discard); err == nil {
		t.Fatal("second build over an existing template succeeded")
	}
	if err := Build(context.Background(), "nope", dir, io.Discard); err == nil {
		t.Fatal("unknown builder accepted")
	}
}
