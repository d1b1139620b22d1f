package tierparity

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/internal/vmtest"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
)

// ociState is the OCI tests' prebuilt state: its busybox template is the
// one template every tier runs here, by name (the microVM tiers build their
// root disk from it).
const ociState = "/var/cache/wovyr-test/oci"

// factsScript prints one fact per line. It starts a local HTTP server and
// fetches from it over 127.0.0.1, as a tool with a local helper does.
const factsScript = `
echo "pwd=$(pwd)"
echo "hostname=$(hostname)"
echo "tmp=$(stat -c %a /tmp)"
mkdir -p /tmp/www && echo pong > /tmp/www/ping
httpd -f -p 127.0.0.1:7777 -h /tmp/www &
got=
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  got=$(wget -q -O - http://127.0.0.1:7777/ping 2>/dev/null) && break
  sleep 0.2
done
kill $! 2>/dev/null
echo "loopback=${got:-unreachable}"
for f in /*; do
  if [ -L "$f" ]; then echo "root=$f -> $(readlink "$f")"; else echo "root=$f"; fi
done
echo "to-stderr" >&2
exit 3
`

// tier is one backend in one mode.
type tier struct {
	name    string
	backend sandbox.Backend
	image   string // the template name the tier's Prepare takes
}

func TestTierParity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the tier-parity test needs root (CI runs as root)")
	}
	tiers := ociTiers(t)
	tiers = append(tiers, microvmTiers(t)...)
	ctx := context.Background()
	var ref *facts
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			if c := tr.backend.Probe(ctx); !c.Available {
				t.Skipf("%s is not available on this node: %s", tr.name, c.Reason)
			}
			got := runFacts(t, ctx, tr)
			want := expected()
			if !want.sameAs(got) {
				t.Fatalf("%s differs from what every tier must show:\n got %s\nwant %s", tr.name, got, want)
			}
			if ref != nil && !ref.sameAs(got) {
				t.Fatalf("%s differs from %s:\n%s\n%s", tr.name, ref.tier, got, ref)
			}
			ref = got
		})
	}
}

// facts is what the script reported, by tier.
type facts struct {
	tier           string
	exit           int
	stdout, stderr string
}

func (f *facts) sameAs(o *facts) bool {
	return f.exit == o.exit && f.stdout == o.stdout && f.stderr == o.stderr
}

func (f *facts) String() string {
	return fmt.Sprintf("[%s] exit %d, stderr %q, stdout:\n%s", f.tier, f.exit, f.stderr, f.stdout)
}

// expected is what every tier prints: the fixed facts, and the busybox
// template's own root listing.
func expected() *facts {
	var b strings.Builder
	b.WriteString("pwd=/workspace\nhostname=wovyr\ntmp=1777\nloopback=pong\n")
	ents, _ := os.ReadDir(image.RootFS(filepath.Join(ociState, "images"), "busybox"))
	root := image.RootFS(filepath.Join(ociState, "images"), "busybox")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if l, err := os.Readlink(filepath.Join(root, e.Name())); err == nil {
			fmt.Fprintf(&b, "root=/%s -> %s\n", e.Name(), l)
		} else {
			fmt.Fprintf(&b, "root=/%s\n", e.Name())
		}
	}
	return &facts{tier: "expected", exit: 3, stdout: b.String(), stderr: "to-stderr\n"}
}

func runFacts(t *testing.T, ctx context.Context, tr tier) *facts {
	t.Helper()
	s, err := tr.backend.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: tr.image})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer s.Destroy(context.WithoutCancel(ctx))
	inv := &sandbox.Invocation{
		ID: "parity", Tenant: "parity",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: tr.image,
			Argv: []string{"/bin/sh", "-c", factsScript}, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}},
		Limits: sandbox.Limits{Wall: 60 * time.Second},
		Policy: sandbox.Policy{Trust: sandbox.Trusted},
	}
	res, err := s.Run(ctx, inv)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Class != sandbox.OK {
		t.Fatalf("run ended %s: %s (stdout %q stderr %q)", res.Class, res.Error, res.Stdout, res.Stderr)
	}
	return &facts{tier: tr.name, exit: res.ExitCode, stdout: string(res.Stdout), stderr: string(res.Stderr)}
}

func ociTiers(t *testing.T) []tier {
	t.Helper()
	agentBin := filepath.Join(t.TempDir(), "wovyr-guest")
	if err := vmtest.BuildGuest(context.Background(), agentBin); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(agentBin), 0o755)
	if !image.Exists(filepath.Join(ociState, "images"), "busybox") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := image.Build(ctx, "busybox", filepath.Join(ociState, "images"), os.Stderr); err != nil {
			t.Fatalf("build the busybox template: %v", err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var out []tier
	for _, pooled := range []bool{false, true} {
		mode := "oneshot"
		if pooled {
			mode = "pooled"
		}
		cfg := oci.Config{StateDir: ociState, Agent: agentBin, Logger: log, Pooled: pooled}
		c, err := oci.NewContainer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g, err := oci.NewGVisor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tier{"container-" + mode, c, "busybox"}, tier{"gvisor-" + mode, g, "busybox"})
	}
	return out
}

// microvmTiers runs the microVM tiers on the busybox template by name, as
// the container tiers do: the VM's root disk is built from the template
// (issue #25 item 2), not from the microVM image's own root.
func microvmTiers(t *testing.T) []tier {
	t.Helper()
	if _, _, err := vmimage.FindKernel("/boot", "/lib/modules"); err != nil {
		t.Logf("no guest kernel on this node, so no microvm tier: %v", err)
		return nil
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Log("qemu-system-x86_64 is not installed, so no microvm tier")
		return nil
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	guest := filepath.Join(dir, "wovyr-guest")
	if err := vmtest.BuildGuest(context.Background(), guest); err != nil {
		t.Fatal(err)
	}
	im, err := vmimage.Build(context.Background(), vmimage.Options{Dir: filepath.Join(dir, "image"), Guest: guest})
	if err != nil {
		t.Fatalf("build the microVM image: %v", err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	var out []tier
	for _, warm := range []bool{false, true} {
		b, err := microvm.New(microvm.Config{StateDir: state, ImageDir: im.Dir, TemplatesDir: filepath.Join(ociState, "images"), Warm: warm})
		if err != nil {
			t.Fatal(err)
		}
		mode := "oneshot"
		if warm {
			mode = "warm"
		}
		out = append(out, tier{"microvm-" + mode, b, "busybox"})
	}
	return out
}
