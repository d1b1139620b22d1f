package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// probeBin is where the egress probe sits in the test's template.
const probeBin = "/usr/local/bin/egressprobe"

// egressImage makes a template for this test run: busybox plus a static
// egress probe (egresstest.RunProbe). It is removed when the test ends.
func egressImage(t testing.TB) string {
	t.Helper()
	imgs := filepath.Join(testState, "images")
	name := fmt.Sprintf("egress-probe-%d", os.Getpid())
	if image.Exists(imgs, name) {
		return name
	}
	root := image.RootFS(imgs, name)
	if err := os.MkdirAll(filepath.Dir(root), 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = image.Remove(imgs, name) })
	if out, err := exec.Command("cp", "-a", image.RootFS(imgs, "busybox"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy busybox template: %v %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(probeBin)), 0o755); err != nil {
		t.Fatal(err)
	}
	buildEgressProbe(t, filepath.Join(root, probeBin))
	return name
}

// buildEgressProbe builds the static egress probe at dst.
func buildEgressProbe(t testing.TB, dst string) {
	t.Helper()
	if err := egresstest.BuildProbe(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
}

// egressRig is a rig, an egress service on it and a container backend
// using that service.
type egressRig struct {
	rig *egresstest.Rig
	cfg egress.Config
	svc *egress.Service
	b   *Backend
}

func newEgressRig(t testing.TB, tag string) *egressRig { return newEgressRigOn(t, tag, "") }

// newEgressRigOn is newEgressRig with the container backend forced onto
// runtime (empty: probed).
func newEgressRigOn(t testing.TB, tag, runtime string) *egressRig {
	t.Helper()
	ctx := context.Background()
	rig, err := egresstest.New(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	r := &egressRig{rig: rig, cfg: rig.Config()}
	t.Cleanup(func() {
		if r.svc != nil {
			if err := r.svc.Close(ctx); err != nil {
				t.Error(err)
			}
			if left, err := egress.Find(ctx, r.cfg); err != nil || !left.Empty() {
				t.Errorf("egress leftovers: %+v %v", left, err)
			}
		}
		if err := rig.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := egress.Reconcile(ctx, r.cfg, nil); err != nil {
		t.Fatal(err)
	}
	if r.svc, err = egress.NewService(ctx, r.cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Network = r.svc
	cfg.Runtime = runtime
	if r.b, err = NewContainer(cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

// runProbe runs the egress probe with spec in a prepared sandbox and
// returns its report.
func runProbe(t *testing.T, sb *Sandbox, tenant string, policy netpolicy.Policy, spec egresstest.ProbeSpec) egresstest.Report {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := sb.Run(ctx, &sandbox.Invocation{
		ID: "inv-" + sb.id, Tenant: tenant,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: sb.image, Argv: []string{probeBin},
			Env: []string{egresstest.ProbeEnv + "=" + string(js)}},
		Limits: sandbox.Limits{Wall: time.Minute, Pids: 512},
		Policy: sandbox.Policy{Trust: sandbox.Trusted, Network: policy},
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := egresstest.ParseReport(res)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func prepareIn(t testing.TB, b *Backend, img string) *Sandbox {
	t.Helper()
	// The probe runs its checks concurrently: room for its threads.
	return prepareTmpl(t, b, sandbox.Template{Kind: sandbox.KindCommand, Image: img, Limits: sandbox.Limits{Pids: 512}})
}

func prepareTmpl(t testing.TB, b *Backend, tmpl sandbox.Template) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Prepare(ctx, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	t.Cleanup(func() { _ = s.Destroy(context.Background()) })
	return s
}

// TestEgressTruthTableContainer runs BATTERY 70–84 (egresstest.TruthTable,
// the same rows as the native backend's) through the container backend: a
// warm sandbox prepared in a deny-all slot is claimed with the tenant's
// allowlist; the probe and a re-executed child of it see exactly that
// allowlist; the harness DNS server never sees the canary; nothing is left.
func TestEgressTruthTableContainer(t *testing.T) {
	for rt, tag := range map[string]string{"crun": "oc", "runc": "ocr"} {
		t.Run(rt, func(t *testing.T) { egressTruthTable(t, tag, rt) })
	}
}

func egressTruthTable(t *testing.T, tag, runtime string) {
	r := newEgressRigOn(t, tag, runtime)
	if capa := r.b.Probe(context.Background()); !capa.Available || !capa.Egress || !strings.HasPrefix(capa.Version, runtime) {
		t.Fatalf("probe on %s with an egress service: %+v", runtime, capa)
	}
	assertTruthTable(t, r, sandbox.Template{})
}

// TestEgressTruthTableGVisor is the same table on gVisor (ADR 0009,
// option 1): a sandbox prepared for an allowlist sits in a deny-all slot,
// and runsc starts with netstack (--network=sandbox) in it only once the
// slot is bound to the tenant's allowlist.
func TestEgressTruthTableGVisor(t *testing.T) {
	r := newEgressRig(t, "og")
	g := gvisorIn(t, r)
	r.b = g
	if capa := g.Probe(context.Background()); !capa.Available || !capa.Egress || !slices.Contains(capa.Features, "egress-netstack") {
		t.Fatalf("gvisor probe with an egress service: %+v", capa)
	}
	assertTruthTable(t, r, sandbox.Template{Egress: true})
}

// gvisorIn is a gVisor backend whose sandboxes for an allowlist sit in
// r's egress slots, netstack in them.
func gvisorIn(tb testing.TB, r *egressRig) *Backend {
	tb.Helper()
	cfg := testConfig(tb)
	cfg.Network = r.svc
	g, err := NewGVisor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// assertTruthTable runs the sandbox truth table in a sandbox of r's
// backend prepared as tmpl says, with a peer beside it.
func assertTruthTable(t *testing.T, r *egressRig, tmpl sandbox.Template) {
	img := egressImage(t)
	tmpl.Kind, tmpl.Image, tmpl.Limits = sandbox.KindCommand, img, sandbox.Limits{Pids: 512}
	peer := prepareTmpl(t, r.b, tmpl)
	sb := prepareTmpl(t, r.b, tmpl)
	gw := sb.net.Gateway().String()
	rows := egresstest.SandboxTable(gw, peer.net.Addr().String())
	spec := egresstest.TableSpec(rows, r.rig.CAPEM, gw)
	assertTableReport(t, rows, runProbe(t, sb, "tenant-a", egresstest.TenantPolicy, spec))
	assertCleanEnd(t, r, r.b, sb, peer)
}

// assertTableReport checks a truth table's report, its child's included.
func assertTableReport(t *testing.T, rows []egresstest.Row, rep egresstest.Report) {
	t.Helper()
	egresstest.AssertTable(t, rows, rep, 0)
	if rep.Child == nil {
		t.Fatalf("child report missing: %s", rep.ChildErr)
	}
	egresstest.AssertTable(t, egresstest.ChildRows(rows), *rep.Child, 1)
}

// assertCleanEnd checks that r's DNS server never saw the canary, then
// destroys sbs (of b) and checks the host kept nothing of them.
func assertCleanEnd(t *testing.T, r *egressRig, b *Backend, sbs ...*Sandbox) {
	t.Helper()
	for _, q := range r.rig.Queries() {
		if strings.Contains(q, egresstest.Canary) {
			t.Errorf("the harness DNS server saw the canary: %s", q)
		}
	}
	for _, s := range sbs {
		if err := s.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
		assertNoLeftovers(t, b, s)
	}
}

// TestEgressDenyAllInSlot: a sandbox prepared in a slot and claimed with no
// policy reaches nothing, names included, as without an egress service.
func TestEgressDenyAllInSlot(t *testing.T) {
	r := newEgressRig(t, "od")
	img := egressImage(t)
	sb := prepareIn(t, r.b, img)
	gw := sb.net.Gateway().String()
	rows := []egresstest.Row{
		{C: egresstest.Check{ID: "tcp", Kind: "tcp", Addr: "10.213.200.1:7001"}, Want: false},
		{C: egresstest.Check{ID: "dns", Kind: "dns", Addr: gw + ":53", Host: "allowed.test"}, Want: false},
		{C: egresstest.Check{ID: "http", Kind: "http", Addr: "10.213.200.1:80", Host: "allowed.test"}, Want: false},
		{C: egresstest.Check{ID: "metadata", Kind: "tcp", Addr: "169.254.169.254:80"}, Want: false},
	}
	rep := runProbe(t, sb, "tenant-b", netpolicy.Policy{}, egresstest.ProbeSpec{Checks: egresstest.Checks(rows), DNS: gw + ":53"})
	egresstest.AssertTable(t, rows, rep, 0)
}

// TestEgressNoNetAdmin: the slot's netns belongs to the host's user
// namespace, so the container's root cannot change links, addresses,
// routes or firewall rules in it (BATTERY 83), and its resolv.conf names
// the stub.
func TestEgressNoNetAdmin(t *testing.T) {
	r := newEgressRig(t, "ot")
	sb := prepareIn(t, r.b, "busybox")
	// The host inspects the live container's namespaces after the run:
	// a one-shot sandbox's would be gone with its workload.
	if err := sb.startAgent(context.Background()); err != nil {
		t.Fatal(err)
	}
	script := `cat /etc/resolv.conf
ip link set eth0 down 2>/dev/null && echo LINKDOWN
ip addr add 10.213.0.99/32 dev eth0 2>/dev/null && echo ADDR
ip route add 10.213.200.0/24 dev eth0 2>/dev/null && echo ROUTE
ip link add dummy0 type dummy 2>/dev/null && echo LINK
echo 0 > /proc/sys/net/ipv4/conf/eth0/rp_filter 2>/dev/null && echo SYSCTL
ls -A /sys | wc -l
ip -4 -o addr show eth0 | awk '{print $4}'
echo end`
	inv := cmd("/bin/sh", "-c", script)
	inv.Workload.Image = "busybox"
	inv.Policy.Network = egresstest.TenantPolicy
	res, err := sb.Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	want := string(sb.net.ResolvConf()) + "1\n" + sb.net.Addr().String() + "/30\nend\n"
	if got := string(res.Stdout); got != want {
		t.Fatalf("stdout %q, want %q (stderr %q)", got, want, res.Stderr)
	}
	// The kernel state behind it: the slot's netns is owned by the host's
	// user namespace, and the container's own user namespace is another.
	owner := nsOwner(t, sb.net.NetnsPath())
	if host := nsIno(t, "/proc/self/ns/user"); owner != host {
		t.Fatalf("slot netns is owned by user namespace %d, not the host's %d", owner, host)
	}
	if theirs := nsIno(t, fmt.Sprintf("/proc/%d/ns/user", sb.agentPID)); theirs == owner {
		t.Fatal("the container runs in the user namespace that owns its netns")
	}
	if theirs, slot := nsIno(t, fmt.Sprintf("/proc/%d/ns/net", sb.agentPID)), nsIno(t, sb.net.NetnsPath()); theirs != slot {
		t.Fatalf("the container's netns %d is not its slot's %d", theirs, slot)
	}
}

// TestEgressUserNSCapsDoNotReachSlot: capabilities inside the container's
// own user namespace (the Privileged control: CAP_SYS_ADMIN, no seccomp)
// give nothing over the slot's netns, which the host's user namespace owns;
// host root (HostPrivileged) can change it — the control that the attempt
// is real.
func TestEgressUserNSCapsDoNotReachSlot(t *testing.T) {
	r := newEgressRig(t, "ou")
	for w, want := range map[battery.Weakness]string{Privileged: "rc=2", HostPrivileged: "rc=0"} {
		wb, err := r.b.Weakened(w)
		if err != nil {
			t.Fatal(err)
		}
		sb := prepareIn(t, wb.(*Backend), "busybox")
		inv := cmd("/bin/sh", "-c", "ip addr add 10.213.0.99/32 dev eth0 2>/dev/null; echo rc=$?")
		inv.Workload.Image = "busybox"
		res, err := sb.Run(context.Background(), inv)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(res.Stdout)); got != want {
			t.Errorf("%s: %q, want %q", w, got, want)
		}
	}
}

// nsOwner returns the inode of the user namespace owning namespace path.
func nsOwner(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestEgressRefusals: allowlists are refused with a typed error before
// anything is claimed where they cannot be enforced — on gVisor and
// container backends without an egress service, on a gVisor sandbox
// prepared without Template.Egress (--network=none, ADR 0009), and for
// IPv6 rules everywhere (slots are IPv4-only).
func TestEgressRefusals(t *testing.T) {
	r := newEgressRig(t, "or")
	cfg := testConfig(t)
	cfg.Network = r.svc
	g, err := NewGVisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewContainer(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	plainG, err := NewGVisor(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	v6 := netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "2001:db8::/32", Ports: []uint16{443}}}}
	for _, c := range []struct {
		name string
		b    *Backend
		p    netpolicy.Policy
		want sandbox.Class
	}{
		{"gvisor-allowlist", g, egresstest.TenantPolicy, ""},
		{"gvisor-without-service", plainG, egresstest.TenantPolicy, sandbox.Unenforceable},
		{"gvisor-ipv6", g, v6, sandbox.Unenforceable},
		{"gvisor-deny-all", g, netpolicy.Policy{}, ""},
		{"container-without-service", plain, egresstest.TenantPolicy, sandbox.Unenforceable},
		{"container-ipv6", r.b, v6, sandbox.Unenforceable},
		{"container-port-0", r.b, netpolicy.Policy{Allow: []netpolicy.Rule{{Host: "a.test", Ports: []uint16{0}}}}, sandbox.BadInput},
		{"container-allowlist", r.b, egresstest.TenantPolicy, ""},
	} {
		err := c.b.CheckNetwork(c.p)
		if got := sandbox.ClassOf(err); got != c.want || (c.want == "") != (err == nil) {
			t.Errorf("%s: %v (class %q), want class %q", c.name, err, got, c.want)
		}
	}
	ctx := context.Background()
	if capa := plainG.Probe(ctx); !capa.Available || capa.Egress {
		t.Fatalf("gvisor without an egress service must stay deny-all: %+v", capa)
	}
	// A sandbox prepared without Template.Egress refuses an allowlist at
	// Run, before claiming: the same sandbox then runs a deny-all one.
	sb := prepareIn(t, g, "busybox")
	inv := cmd("/bin/true")
	inv.Policy.Network = egresstest.TenantPolicy
	if _, err := sb.Run(ctx, inv); sandbox.ClassOf(err) != sandbox.Unenforceable || !strings.Contains(err.Error(), "template.egress false") {
		t.Fatalf("gvisor run with an allowlist on a deny-all sandbox: %v", err)
	}
	inv.Policy.Network = netpolicy.Policy{}
	if res, err := sb.Run(ctx, inv); err != nil || res.ExitCode != 0 {
		t.Fatalf("deny-all run after the refusal: %v %+v", err, res)
	}
	if sb.net != nil {
		t.Fatal("a gvisor sandbox got an egress slot")
	}
	if !errors.Is(plainG.CheckNetwork(egresstest.TenantPolicy), sandbox.Unenforceable) {
		t.Fatal("gvisor refusal is not errors.Is Unenforceable")
	}
}

// anyCert certifies every key: TestEgressSelect is about the network
// check, not certification.
type anyCert struct{}

func (anyCert) Cert(k cert.Key) (cert.Record, error) {
	return cert.Record{Key: k, Passed: true, Outcomes: []cert.Outcome{{ID: 70, Applies: true, Pass: true, ControlFlagged: true}}}, nil
}

// TestEgressSelect: at Select time the manager refuses an allowlist on a
// gVisor without an egress service (Capability.Egress=false) with a floor
// error naming why, and picks the container backend with an egress service
// where the floor allows it.
func TestEgressSelect(t *testing.T) {
	r := newEgressRig(t, "os")
	g, err := NewGVisor(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Config{Backends: []sandbox.Backend{r.b, g}, Certs: anyCert{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := sandbox.Policy{Trust: sandbox.Untrusted, Network: egresstest.TenantPolicy}
	_, err = m.Select(ctx, allow, sandbox.KindCommand)
	var fe *sandbox.FloorError
	if !errors.As(err, &fe) || len(fe.Rejections) != 1 || fe.Rejections[0].Backend != "gvisor" ||
		!strings.Contains(fe.Rejections[0].Reason, "egress allowlist") {
		t.Fatalf("untrusted with an allowlist: %v, want floor-unmet naming gvisor's egress", err)
	}
	if b, err := m.Select(ctx, sandbox.Policy{Trust: sandbox.Untrusted}, sandbox.KindCommand); err != nil || b.Name() != "gvisor" {
		t.Fatalf("untrusted deny-all: %v %v, want gvisor", b, err)
	}
	allow.Trust = sandbox.Internal
	if b, err := m.Select(ctx, allow, sandbox.KindCommand); err != nil || b.Name() != "container" {
		t.Fatalf("internal with an allowlist: %v %v, want container", b, err)
	}
}

// slotRows are the battery rows outside 71–84 whose outcome or control
// the slot changes (namespaces, spec lint, mounts, sysfs, sysctls, setns,
// the deny-all row, the mount table's host paths).
var slotRows = []int{2, 6, 9, 10, 12, 27, 43, 70, 93}

// TestEgressBattery runs the container and gVisor batteries' egress rows
// (71–84) with an egress service, and the rows the slot touches: each holds, and each
// positive control flags — for the egress rows, the tenant's allowlist
// replaced by an open one, the host netns instead of the slot, host root.
// (With a slot, every other row's outcome is unchanged: run the whole
// Suite with Config.Network to see; ~2 minutes.)
func TestEgressBattery(t *testing.T) {
	for name, c := range map[string]struct {
		tag string
		mk  func(Config) (*Backend, error)
	}{"container": {"ob", NewContainer}, "gvisor": {"ogb", NewGVisor}} {
		t.Run(name, func(t *testing.T) { egressBattery(t, c.tag, c.mk) })
	}
}

func egressBattery(t *testing.T, tag string, mk func(Config) (*Backend, error)) {
	r := newEgressRig(t, tag)
	cfg := testConfig(t)
	cfg.Network = r.svc
	cfg.EgressProbe = filepath.Join(t.TempDir(), "egressprobe")
	buildEgressProbe(t, cfg.EgressProbe)
	b, err := mk(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := Suite(b, "busybox")
	var probes []battery.Probe
	egressRows := 0
	for _, p := range s.Probes {
		if p.ID >= 71 && p.ID <= 84 {
			egressRows++
		}
		if p.ID >= 71 && p.ID <= 84 || slices.Contains(slotRows, p.ID) {
			probes = append(probes, p)
		}
	}
	if egressRows != 13 {
		t.Fatalf("%d egress probes, want 13 (71–84 but 82)", egressRows)
	}
	s.Probes = probes
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rec, err := battery.Run(ctx, s, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range rec.Outcomes {
		egress := o.ID >= 71 && o.ID <= 84
		if !egress && !slices.Contains(slotRows, o.ID) {
			continue
		}
		seen++
		switch {
		case o.ID == 82:
			if o.Applies {
				t.Errorf("#82 should not apply: %+v", o)
			}
		case !o.Pass:
			t.Errorf("#%d %s: FAIL: %s", o.ID, o.Name, o.Observed)
		case !o.ControlFlagged:
			t.Errorf("#%d %s: control did not flag: %s", o.ID, o.Name, o.ControlObserved)
		case egress && (!strings.Contains(o.ControlObserved, "of the row's checks wrong") || strings.Contains(o.ControlObserved, "] 0 of the row's")):
			// The control must have run the table and seen this row's
			// checks broken, not failed to run or broken only others.
			t.Errorf("#%d %s: control flagged without a table: %s", o.ID, o.Name, o.ControlObserved)
		}
	}
	if seen != 14+len(slotRows) {
		t.Fatalf("%d outcomes for rows 71–84 and %v", seen, slotRows)
	}
}
