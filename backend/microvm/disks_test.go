package microvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
)

// makeTemplate writes a busybox template name under dir whose
// /etc/wovyr-template says name, as `wovyr image build` or `image import`
// would leave it, but without a recorded digest (a template made before
// digests were).
func makeTemplate(t testing.TB, dir, name string) string {
	t.Helper()
	root := image.RootFS(dir, name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := vmimage.BusyboxRoot(context.Background(), "/bin/busybox", root); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/wovyr-template"), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func newTestDisks(t *testing.T) (*disks, string) {
	t.Helper()
	dir := t.TempDir()
	templates := filepath.Join(dir, "images")
	return newDisks(filepath.Join(dir, "disks"), templates, slog.New(slog.DiscardHandler)), templates
}

func diskCat(t *testing.T, disk, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, disk).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// TestRootDiskCacheReusesUntilTheDigestChanges: the second use of a
// template gets the same disk file; a template with another digest gets a
// new disk and the old one is removed.
func TestRootDiskCacheReusesUntilTheDigestChanges(t *testing.T) {
	d, templates := newTestDisks(t)
	ctx := context.Background()
	root := makeTemplate(t, templates, "py")
	first, err := d.rootDisk(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	if got := diskCat(t, first, "/etc/wovyr-template"); got != "py\n" {
		t.Fatalf("disk holds %q", got)
	}
	again, err := d.rootDisk(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	if again != first || !sameFile(t, first, again) {
		t.Fatalf("second use rebuilt the disk: %s, then %s", first, again)
	}
	// A fresh cache (another process) finds the same disk too.
	other := newDisks(d.dir, templates, d.log)
	if p, err := other.rootDisk(ctx, "py"); err != nil || !sameFile(t, first, p) {
		t.Fatalf("another cache on the same directory: %s %v", p, err)
	}

	// The template is replaced: new contents, a recorded digest.
	if err := os.WriteFile(filepath.Join(root, "etc/wovyr-template"), []byte("py v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest, err := image.TreeDigest(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(templates, "py", image.DigestFile), []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := d.rootDisk(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("a new digest kept the disk %s", first)
	}
	if got := diskCat(t, second, "/etc/wovyr-template"); got != "py v2\n" {
		t.Fatalf("rebuilt disk holds %q", got)
	}
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale disk survives: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(second)); len(ents) != 1 {
		t.Errorf("cache holds %d files for py, want 1", len(ents))
	}
}

// TestRootDiskCacheUnknownTemplate: bad input naming workload.image,
// wrapping image.ErrNotFound, and nothing is created.
func TestRootDiskCacheUnknownTemplate(t *testing.T) {
	d, templates := newTestDisks(t)
	makeTemplate(t, templates, "py")
	for _, name := range []string{"ruby", "../images/py", "py/rootfs"} {
		_, err := d.rootDisk(context.Background(), name)
		if !errors.Is(err, sandbox.BadInput) || !errors.Is(err, image.ErrNotFound) || sandbox.FieldOf(err) != "workload.image" {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := os.Stat(d.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unknown template created the cache: %v", err)
	}
}

// TestRootDiskCacheConcurrentBuilders: builders in two caches (two
// processes) racing for the same disk all get a whole one, and no
// temporary file is left.
func TestRootDiskCacheConcurrentBuilders(t *testing.T) {
	d, templates := newTestDisks(t)
	makeTemplate(t, templates, "py")
	caches := []*disks{d, newDisks(d.dir, templates, d.log)}
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	start := make(chan struct{})
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			paths[i], errs[i] = caches[i%2].rootDisk(context.Background(), "py")
		}()
	}
	close(start)
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("builder %d: %s %v (builder 0: %s)", i, paths[i], errs[i], paths[0])
		}
	}
	if got := diskCat(t, paths[0], "/etc/wovyr-template"); got != "py\n" {
		t.Fatalf("disk holds %q", got)
	}
	ents, _ := os.ReadDir(filepath.Dir(paths[0]))
	if len(ents) != 1 {
		t.Fatalf("cache holds %v, want the one disk", ents)
	}
}

// TestRootDiskCacheReconcile: start-up removes the disks of templates that
// are gone and dead builders' temporary files, and keeps the rest.
func TestRootDiskCacheReconcile(t *testing.T) {
	d, templates := newTestDisks(t)
	ctx := context.Background()
	makeTemplate(t, templates, "py")
	makeTemplate(t, templates, "gone")
	keep, err := d.rootDisk(ctx, "py")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := d.rootDisk(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := image.Remove(templates, "gone"); err != nil {
		t.Fatal(err)
	}
	dead := keep + vmimage.TempInfix + "999999999-1"
	live := keep + vmimage.TempInfix + fmt.Sprint(os.Getpid()) + "-1"
	for _, p := range []string{dead, live} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.reconcile(); err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.Walk(d.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			left = append(left, strings.TrimPrefix(p, d.dir+"/"))
		}
		return nil
	})
	want := []string{strings.TrimPrefix(keep, d.dir+"/"), strings.TrimPrefix(live, d.dir+"/")}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("after reconcile: %v, want %v (gone's disk was %s)", left, want, gone)
	}
}

// BenchmarkRootDiskBuild measures what a template's first microVM use
// adds: hashing a template that has no recorded digest, and building its
// root disk (mkfs.ext4 -d, sync, rename), for the OCI tests' busybox and
// base templates.
func BenchmarkRootDiskBuild(b *testing.B) {
	for _, name := range []string{"busybox", "base"} {
		b.Run(name, func(b *testing.B) {
			if !image.Exists(ociTemplates, name) {
				b.Skipf("no %s template in %s", name, ociTemplates)
			}
			dir := b.TempDir()
			var digest, build time.Duration
			for b.Loop() {
				d := newDisks(filepath.Join(dir, "disks"), ociTemplates, slog.New(slog.DiscardHandler))
				t0 := time.Now()
				if _, err := d.digest(name); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := d.rootDisk(context.Background(), name); err != nil {
					b.Fatal(err)
				}
				digest, build = digest+t1.Sub(t0), build+time.Since(t1)
				os.RemoveAll(d.dir)
			}
			b.ReportMetric(float64(digest.Milliseconds())/float64(b.N), "digest-ms/op")
			b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "build-ms/op")
		})
	}
}
