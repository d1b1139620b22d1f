package microvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// TestTemplateRootDisk is issue #25 item 2: a template of the node's store
// (here one that is not the microVM image's own root) runs on microVM,
// one-shot and warm (as a pool for the template prepares it), and its
// sandboxes refuse another image.
func TestTemplateRootDisk(t *testing.T) {
	b := backend(t)
	templates := filepath.Join(t.TempDir(), "images")
	makeTemplate(t, templates, "py")
	ctx := context.Background()
	t.Cleanup(func() { os.RemoveAll(filepath.Join(disksDir(b.cfg.StateDir), "py")) })
	for _, warm := range []bool{false, true} {
		vb := sibling(t, b, func(c *Config) { c.TemplatesDir, c.Warm = templates, warm })
		if err := vb.CheckImage("py"); err != nil {
			t.Fatalf("CheckImage(py): %v", err)
		}
		if err := vb.CheckImage("ruby"); sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != "workload.image" ||
			err.Error() != `bad-input (workload.image): no template "ruby" on this node: image: no such template: ruby (build it with wovyr image build, or wovyr image import)` {
			t.Fatalf("CheckImage(ruby): %v", err)
		}
		s, err := vb.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "py"})
		if err != nil {
			t.Fatalf("warm=%v: prepare: %v", warm, err)
		}
		in := inv("/bin/sh", "-c", `cat /etc/wovyr-template; pwd; hostname; echo err >&2; exit 4`)
		in.Workload.Image = "busybox"
		if _, err := s.Run(ctx, in); sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != "workload.image" {
			t.Fatalf("warm=%v: another image on py's sandbox: %v", warm, err)
		}
		in.Workload.Image = "py"
		in.Workload.Env = []string{"PATH=/bin:/usr/bin"}
		res, err := s.Run(ctx, in)
		if err != nil {
			t.Fatalf("warm=%v: %v", warm, err)
		}
		if string(res.Stdout) != "py\n/workspace\nwovyr\n" || string(res.Stderr) != "err\n" || res.ExitCode != 4 || res.Class != sandbox.OK {
			t.Fatalf("warm=%v: stdout %q stderr %q exit %d class %q (%s)", warm, res.Stdout, res.Stderr, res.ExitCode, res.Class, res.Error)
		}
		if err := s.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		assertClean(t, b, vmName(s))
	}
	if ents, _ := os.ReadDir(filepath.Join(disksDir(b.cfg.StateDir), "py")); len(ents) != 1 {
		t.Errorf("py has %d disks, want the one both sandboxes used", len(ents))
	}
}

// ociTemplates is the OCI tests' prebuilt template store, read only here.
const ociTemplates = "/var/cache/wovyr-test/oci/images"

// TestBaseTemplate runs the debootstrap template (a Debian root, as `image
// import` of a distribution image gives) on microVM, as backend/oci's
// TestBaseImage does on container and gVisor. Building "base" needs the
// network, so it is built once per machine outside the tests:
//
//	wovyr --state-dir /var/cache/wovyr-test/oci image build base
func TestBaseTemplate(t *testing.T) {
	if !image.Exists(ociTemplates, "base") {
		t.Skip("base template not cached in " + ociTemplates + " (building it needs the network; see the doc comment)")
	}
	b := sibling(t, backend(t), func(c *Config) { c.TemplatesDir = ociTemplates })
	t.Cleanup(func() { os.RemoveAll(filepath.Join(disksDir(b.cfg.StateDir), "base")) })
	ctx := context.Background()
	start := time.Now()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "base"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	t.Logf("prepare with the root disk built: %v", time.Since(start))
	in := inv("/bin/sh", "-c", "cat /etc/debian_version; ls -l /usr/bin/env | cut -c1-10; id -u; pwd")
	in.Workload.Image = "base"
	in.Workload.Env = []string{"PATH=/usr/bin:/bin"}
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	version, err := os.ReadFile(filepath.Join(image.RootFS(ociTemplates, "base"), "etc/debian_version"))
	if err != nil {
		t.Fatal(err)
	}
	want := string(version) + "-rwxr-xr-x\n0\n/workspace\n"
	if string(res.Stdout) != want || string(res.Stderr) != "" || res.ExitCode != 0 {
		t.Fatalf("exit %d stdout %q stderr %q (%s), want %q", res.ExitCode, res.Stdout, res.Stderr, res.Error, want)
	}
}

// TestTemplateWarmupInVM is issue #17's template-declared warm-up on
// microVM: a warm VM runs it before any tenant, whose job finds what it
// left; a failing one fails the Prepare, naming it; and the golden key
// follows it.
func TestTemplateWarmupInVM(t *testing.T) {
	b := backend(t)
	templates := filepath.Join(t.TempDir(), "images")
	makeTemplate(t, templates, "warm")
	ctx := context.Background()
	t.Cleanup(func() { os.RemoveAll(filepath.Join(disksDir(b.cfg.StateDir), "warm")) })
	vb := sibling(t, b, func(c *Config) { c.TemplatesDir, c.Warm = templates, true })
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: "warm"}
	p, err := vb.probed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, root, err := vb.rootFor(ctx, p, "warm")
	if err != nil {
		t.Fatal(err)
	}
	noWarmup := vb.goldenKey(p, tmpl, root)

	if err := image.SetWarmup(templates, "warm", []string{"/bin/sh", "-c", "echo warmed > /tmp/warm-mark"}); err != nil {
		t.Fatal(err)
	}
	if vb.goldenKey(p, tmpl, root) == noWarmup {
		t.Error("the golden key does not follow the template's warm-up")
	}
	s, err := vb.Prepare(ctx, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	in := inv("/bin/cat", "/tmp/warm-mark")
	in.Workload.Image = "warm"
	res, err := s.Run(ctx, in)
	if err != nil || string(res.Stdout) != "warmed\n" || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	s.Destroy(ctx)
	assertClean(t, b, vmName(s))

	if err := image.SetWarmup(templates, "warm", []string{"/bin/sh", "-c", "echo broken >&2; exit 3"}); err != nil {
		t.Fatal(err)
	}
	_, err = vb.Prepare(ctx, tmpl)
	want := `template warm: warm-up ["/bin/sh" "-c" "echo broken >&2; exit 3"] exited 3: broken`
	if sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), want) {
		t.Fatalf("prepare with a failing warm-up: %v, want a backend-failure saying %q", err, want)
	}
}
