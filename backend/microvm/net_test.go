package microvm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmimage"
	"github.com/wovyr/wovyr/vmm"
)

// egressProbe is the static egress probe, built once per test binary.
var egressProbe struct {
	sync.Once
	data []byte
	err  error
}

func probeFile(t *testing.T) sandbox.File {
	t.Helper()
	egressProbe.Do(func() {
		dir, err := os.MkdirTemp("", "wovyr-egressprobe-")
		if err != nil {
			egressProbe.err = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "egressprobe")
		if egressProbe.err = egresstest.BuildProbe(context.Background(), p); egressProbe.err == nil {
			egressProbe.data, egressProbe.err = os.ReadFile(p)
		}
	})
	if egressProbe.err != nil {
		t.Fatal(egressProbe.err)
	}
	return sandbox.File{Path: "egressprobe", Data: egressProbe.data, Mode: 0o755}
}

// netBackend is the shared backend with an egress service on a fresh rig
// (tag names its namespaces); cleanup closes both and checks that nothing
// of the slots is left.
func netBackend(t testing.TB, tag string, mod func(*Config)) (*Backend, *egresstest.Rig, *egress.Service) {
	t.Helper()
	ctx := context.Background()
	b := backend(t)
	rig, err := egresstest.New(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rig.Config()
	if err := egress.Reconcile(ctx, cfg, nil); err != nil {
		rig.Close()
		t.Fatal(err)
	}
	svc, err := egress.NewService(ctx, cfg, nil)
	if err != nil {
		rig.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
		if left, err := egress.Find(ctx, cfg); err != nil || !left.Empty() {
			t.Errorf("egress leftovers: %+v %v", left, err)
		}
		if err := rig.Close(); err != nil {
			t.Error(err)
		}
	})
	nb := sibling(t, b, func(c *Config) {
		c.Network = svc
		if mod != nil {
			mod(c)
		}
	})
	return nb, rig, svc
}

func egressInv(t *testing.T, id string, spec egresstest.ProbeSpec) *sandbox.Invocation {
	in := egressInvocation(id, spec, probeFile(t).Data)
	in.Tenant = "tenant-a"
	return in
}

func runReport(t *testing.T, s sandbox.Sandbox, in *sandbox.Invocation) (*sandbox.Result, egresstest.Report) {
	t.Helper()
	res, err := s.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var rep egresstest.Report
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		t.Fatalf("probe: class %q exit %d: %s\n%s", res.Class, res.ExitCode, res.Error, res.Stderr)
	}
	if err := json.Unmarshal(res.Stdout, &rep); err != nil {
		t.Fatalf("report: %v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	return res, rep
}

func assertNoCanary(t *testing.T, rig *egresstest.Rig) {
	t.Helper()
	qs := strings.Join(rig.Queries(), "\n")
	if strings.Contains(qs, egresstest.Canary) {
		t.Errorf("the harness DNS server saw the canary:\n%s", qs)
	}
	if !strings.Contains(qs, "allowed.test") { // positive control: the stub does go upstream
		t.Errorf("the stub never asked upstream for allowed.test:\n%s", qs)
	}
}

// TestEgressBattery runs BATTERY 70–81, 83, 84 through battery.Run: from
// inside a one-shot microVM whose NIC is a tap in its egress slot (and from
// a re-executed child) the guest, root in its own kernel, reaches exactly
// the tenant's allowlist; the control, a VM on the harness's upstream
// network with nothing in between, is flagged on every row. Two boots.
func TestEgressBattery(t *testing.T) {
	b := backend(t)
	for _, o := range runRows(t, EgressSuite(b, battery.Suite{}, probeFile(t).Data), egressRows...) {
		if o.ID == 70 && !regexp.MustCompile(`gw=(10\.213\.0\.\d+) default via (10\.213\.0\.\d+) dev eth0`).MatchString(o.Tried) {
			t.Errorf("the guest's resolver and route are not its slot's gateway: %s", o.Tried)
		}
	}
	if left, err := netns.List("wovyr-" + egressTag + "-"); err != nil || len(left) > 0 {
		t.Errorf("harness or slot namespaces survive: %v %v", left, err)
	}
	// Per-VM entries go only once their VM is gone. (Other tests' VMs may
	// run meanwhile, so no global look at cgroups or processes here.)
	if left, _ := filepath.Glob(filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-vm-*")); len(left) > 0 {
		t.Errorf("VMs survive: %v", left)
	}
}

// TestEgressWarmClaim: a warm VM boots with a NIC on a slot that denies
// everything; Run applies the claiming tenant's policy to it.
func TestEgressWarmClaim(t *testing.T) {
	ctx := context.Background()
	b, rig, _ := netBackend(t, "mw", func(c *Config) { c.Warm = true })
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	assertClaimHolds(t, b, rig, s)
	if err := s.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertClean(t, b, vmName(s))
}

// assertClaimHolds runs a claiming tenant's allowlist on the warm (or
// cloned) VM s: exactly the allowlist is reachable, through the VM's own
// slot.
func assertClaimHolds(t *testing.T, b *Backend, rig *egresstest.Rig, s sandbox.Sandbox) {
	t.Helper()
	n := s.(*vmSandbox).net
	if n == nil {
		t.Fatal("a warm VM of a backend with a network service has no NIC")
	}
	gw := n.slot.Gateway().String()
	want := map[string]bool{
		"70-tcp-allowed": true, "70-tcp-port-denied": true, "71-quic-udp443": true, "74-metadata-http": true,
		"76-Canary-a": true, "77-rogue-resolver": true, "dns-allowed": true, "tls-allowed": true,
		"79-sni-allowed-ip-not": true, "75-gateway-service": true, "83-spoof-source": true, "70-tcp-allowed-after": true,
	}
	var rows []egresstest.Row
	for _, r := range egresstest.TruthTable(gw, "10.213.0.9") {
		if want[r.C.ID] {
			rows = append(rows, r)
		}
	}
	spec := egresstest.ProbeSpec{Checks: egresstest.Checks(rows), CA: rig.CAPEM, DNS: gw + ":53", Timeout: probeTimeout(b.probe.accel)}
	_, rep := runReport(t, s, egressInv(t, "inv-warm-1", spec))
	egresstest.AssertTable(t, rows, rep, 0)
	assertNoCanary(t, rig)
}

// TestEgressCloneClaim is invariant 2 after restore: a clone of a golden
// captured with a NIC moves to its own slot, MAC and address at thaw, and
// the claiming tenant's policy holds on it exactly as on a booted VM.
func TestEgressCloneClaim(t *testing.T) {
	ctx := context.Background()
	b, rig, _ := netBackend(t, "mc", func(c *Config) { c.Warm = true })
	g, err := b.Golden(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Restore(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	n := s.(*vmSandbox).net
	if g.(*golden).meta.Net == n.guest.String() {
		t.Fatalf("the clone's slot %s is its golden's", n.guest)
	}
	res, err := s.Run(ctx, inv("/bin/sh", "-c", "cat /sys/class/net/eth0/address; ip -4 -o addr show dev eth0 | awk '{print $4}'"))
	if err != nil {
		t.Fatal(err)
	}
	if want := n.mac.String() + "\n" + n.guest.Addr.String() + "\n"; string(res.Stdout) != want {
		t.Fatalf("clone NIC %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
	c2, err := b.Restore(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Destroy(ctx)
	assertClaimHolds(t, b, rig, c2)
	if err := c2.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertClean(t, b, vmName(c2))
}

// TestEgressDenyAllHasNoNIC: with a network service, a one-shot deny-all
// invocation still boots without any NIC, and policies the service cannot
// hold are refused before anything starts.
func TestEgressDenyAllHasNoNIC(t *testing.T) {
	ctx := context.Background()
	b, _, _ := netBackend(t, "mn", nil)
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	v6 := inv("/bin/true")
	v6.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "fd00::/8", Ports: []uint16{443}}}}
	if _, err := s.Run(ctx, v6); sandbox.ClassOf(err) != sandbox.Unenforceable {
		t.Fatalf("IPv6 allowlist: %v, want policy-unenforceable", err)
	}
	res, err := s.Run(ctx, inv("/bin/sh", "-c", "ls /sys/class/net | tr '\\n' ' '; echo; cat /etc/resolv.conf 2>/dev/null; true"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "lo \n" {
		t.Errorf("deny-all guest network: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if s.(*vmSandbox).net != nil {
		t.Error("a deny-all one-shot invocation got an egress slot")
	}
}

// The initramfs list name is shared by the image builder and the guest.
func TestNetModuleListName(t *testing.T) {
	if vmimage.NetModuleList != agent.NetModuleList {
		t.Fatalf("vmimage writes %q, the guest reads %q", vmimage.NetModuleList, agent.NetModuleList)
	}
}

// TestLintArgvNIC: probe 6 accepts exactly the NIC an egress slot gives and
// flags any other network device or backend.
func TestLintArgvNIC(t *testing.T) {
	base := []string{"qemu", "-nodefaults", "-sandbox", vmm.SandboxOpts}
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-netdev", "tap,id=net0,fd=9", "-device", "virtio-net-device,netdev=net0,mac=02:00:00:00:00:2a"}, true},
		{[]string{"-netdev", "tap,id=net0,ifname=tap0,script=no", "-device", "virtio-net-device,netdev=net0,mac=02:00:00:00:00:2a"}, false},
		{[]string{"-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0,mac=02:00:00:00:00:2a"}, false},
		{[]string{"-netdev", "tap,id=net0,fd=9,vhost=on", "-device", "virtio-net-device,netdev=net0,mac=02:00:00:00:00:2a"}, false},
		{[]string{"-device", "virtio-net-device,netdev=u"}, false},
		{[]string{"-nic", "user"}, false},
		{[]string{"-incoming", "defer", "-chardev", "socket,id=qmp,fd=12", "-mon", "chardev=qmp,mode=control"}, true},
		{[]string{"-incoming", "tcp:0:4444"}, false},
		{[]string{"-mon", "chardev=qmp,mode=readline"}, false},
	} {
		dir := t.TempDir()
		argv := append(append([]string{}, base...), c.args...)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644)
		os.WriteFile(filepath.Join(dir, "status"), []byte("Uid:\t1000\t1000\t1000\t1000\n"), 0o644)
		if bad := lintArgv(dir); (len(bad) == 0) != c.ok {
			t.Errorf("%v: findings %v, want ok=%v", c.args, bad, c.ok)
		}
	}
}
