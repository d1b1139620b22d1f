package oci

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// warmTemplateBackends are pooled container and gVisor backends over a
// state dir of their own holding template "warm", a copy of the busybox
// test template.
func warmTemplateBackends(t *testing.T) (map[string]*Backend, string) {
	t.Helper()
	dir := privateState(t, "wovyr-warm-")
	images := filepath.Join(dir, "images")
	if err := os.MkdirAll(filepath.Join(images, "warm"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(images, 0o711); err != nil {
		t.Fatal(err)
	}
	src := image.RootFS(filepath.Join(testState, "images"), "busybox")
	if out, err := exec.Command("cp", "-a", src, image.RootFS(images, "warm")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	m := map[string]*Backend{}
	for _, c := range constructors {
		cfg := testConfig(t)
		cfg.StateDir, cfg.Pooled = dir, true
		b, err := c.new(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if capa := b.Probe(context.Background()); !capa.Available {
			t.Fatal(capa.Reason)
		}
		m[c.name] = b
	}
	return m, images
}

// TestTemplateWarmup is issue #17's template-declared warm-up: a pooled
// sandbox runs the template's warm-up before any tenant, and the tenant
// finds what it left; a warm-up that fails fails the Prepare, naming it.
func TestTemplateWarmup(t *testing.T) {
	bs, images := warmTemplateBackends(t)
	ctx := context.Background()
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: "warm"}
	for name, b := range bs {
		t.Run(name, func(t *testing.T) {
			if err := image.SetWarmup(images, "warm", []string{"/bin/sh", "-c", "echo warmed by $(id -u) > /tmp/warm-mark"}); err != nil {
				t.Fatal(err)
			}
			sb, err := b.Prepare(ctx, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			inv := cmd("/bin/cat", "/tmp/warm-mark")
			inv.Workload.Image = "warm"
			res, err := sb.Run(ctx, inv)
			if err != nil || string(res.Stdout) != "warmed by 0\n" {
				t.Fatalf("run: %v %+v", err, res)
			}
			sb.Destroy(ctx)
			assertNoLeftovers(t, b, sb.(*Sandbox))

			bad := []string{"/bin/sh", "-c", "echo broken >&2; exit 3"}
			if err := image.SetWarmup(images, "warm", bad); err != nil {
				t.Fatal(err)
			}
			_, err = b.Prepare(ctx, tmpl)
			want := `warm-up: template warm: warm-up ["/bin/sh" "-c" "echo broken >&2; exit 3"] exited 3: broken`
			if sandbox.ClassOf(err) != sandbox.BackendFailure || !strings.Contains(err.Error(), want) {
				t.Fatalf("prepare with a failing warm-up: %v, want a backend-failure saying %q", err, want)
			}
			if ents, _ := os.ReadDir(filepath.Join(b.run, "sb")); len(ents) != 0 {
				t.Errorf("a failed prepare left %d sandbox directories", len(ents))
			}
		})
	}
}

// TestGoldenKeyCoversWarmup: a golden of a template is never restored
// after its warm-up changed.
func TestGoldenKeyCoversWarmup(t *testing.T) {
	bs, images := warmTemplateBackends(t)
	b := bs["gvisor"]
	tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: "warm"}
	d, err := b.chosen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, argv := range [][]string{nil, {"/bin/true"}, {"/bin/true", "again"}} {
		if err := image.SetWarmup(images, "warm", argv); err != nil {
			t.Fatal(err)
		}
		k, err := b.goldenKey(d, "warm", tmpl)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.Template)
	}
	if keys[0] == keys[1] || keys[1] == keys[2] || keys[0] == keys[2] {
		t.Fatalf("golden keys %q do not follow the warm-up", keys)
	}
}
