package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/vmm"
)

// egressRows are the battery rows the egress harness lets the microvm
// backend probe: 70–81, 83 and 84 (82, unix sockets, is inside the guest).
var egressRows = []int{70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 83, 84}

// EgressSuite is Suite(b, controls) plus the egress rows, for nodes that have the
// egress harness: probe is the static egress probe binary
// (egresstest.BuildProbe). Each side (target and control) builds a harness
// (package egresstest: namespaces only, nothing leaves the machine), an
// egress service over it, and boots one one-shot VM that runs the whole
// truth table, and again from a re-executed child; every row is judged from
// that one run. The target's VM gets its NIC from an egress slot, as in
// production; the control's (WeakOpenNetwork) sits on the harness's upstream
// network with nothing in between, which every row must flag.
func EgressSuite(b *Backend, controls battery.Suite, probe []byte) battery.Suite {
	s := Suite(b, controls)
	// One run per configuration: battery.Run weakens a fresh copy for
	// every row's control, all with the same configuration hash.
	var mu sync.Mutex
	runs := map[string]*egressRun{}
	run := func(ctx context.Context, mb *Backend) *egressRun {
		mu.Lock()
		defer mu.Unlock()
		key := mb.probe.cap.ConfigHash
		if runs[key] == nil {
			r := &egressRun{}
			r.err = mb.runEgress(ctx, probe, r)
			if late := r.lateAllowed(); len(late) > 0 {
				// An allowed connect that timed out is liveness (a TCG
				// guest on a loaded host), not a breach: run once more and
				// say so. A denial that failed is never retried.
				r2 := &egressRun{retried: late}
				r2.err = mb.runEgress(ctx, probe, r2)
				r = r2
			}
			runs[key] = r
		}
		return runs[key]
	}
	for _, id := range egressRows {
		delete(s.NotApplicable, id)
		s.Probes = append(s.Probes, vmProbe(id, WeakOpenNetwork, func(ctx context.Context, mb *Backend) battery.Observation {
			return judgeEgress(id, run(ctx, mb))
		}))
	}
	return s
}

// egressRun is one truth-table run from inside a VM.
type egressRun struct {
	egresstest.Run
	gw      string
	err     error
	retried []string // allowed checks that timed out in a first run
}

// lateAllowed returns the checks of a completed run that should have
// succeeded and did not, if those are its only mismatches.
func (r *egressRun) lateAllowed() []string {
	if r.err != nil {
		return nil
	}
	var late []string
	check := func(rows []egresstest.Row, rep *egresstest.Report) bool {
		if rep == nil || len(rep.Outcomes) != len(rows) {
			return false
		}
		for i, row := range rows {
			if rep.Outcomes[i].OK != row.Want {
				if !row.Want {
					return false
				}
				late = append(late, row.C.ID)
			}
		}
		return true
	}
	if !check(r.Rows, &r.Rep) || !check(egresstest.ChildRows(r.Rows), r.Rep.Child) {
		return nil
	}
	return late
}

// egressTag names the battery's harness namespaces (runs are sequential:
// each removes its harness before the next starts).
const egressTag = "mb"

func (b *Backend) runEgress(ctx context.Context, probe []byte, r *egressRun) (err error) {
	rig, svc, stop, err := egresstest.NewWithService(ctx, egressTag, b.cfg.Logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	peer, err := svc.NewSlot(ctx) // another tenant's slot
	if err != nil {
		return err
	}
	defer peer.Close(context.WithoutCancel(ctx))
	nb := &Backend{cfg: b.cfg, probe: b.probe, disks: b.disks}
	nb.cfg.Network, nb.cfg.Warm, nb.cfg.rig = svc, false, rig
	s, err := nb.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Destroy(context.WithoutCancel(ctx))) }()
	r.Rows = egresstest.TruthTable("@GW@", peer.Addr().String())
	to := probeTimeout(b.probe.accel)
	child := egresstest.ProbeSpec{Checks: egresstest.Checks(egresstest.ChildRows(r.Rows)), CA: rig.CAPEM, DNS: "@GW@:53", Timeout: to}
	spec := egresstest.ProbeSpec{Checks: egresstest.Checks(r.Rows), CA: rig.CAPEM, DNS: "@GW@:53", Child: &child, Timeout: to}
	res, err := s.Run(ctx, egressInvocation("battery-egress", spec, probe))
	if err != nil {
		return err
	}
	r.Queries = rig.Queries()
	if res.Class != sandbox.OK || res.ExitCode != 0 {
		return fmt.Errorf("egress probe: class %q exit %d: %s: %s", res.Class, res.ExitCode, res.Error, tail(res.Stderr, 512))
	}
	r.gw = strings.TrimSpace(string(res.Stderr))
	if err := json.Unmarshal(res.Stdout, &r.Rep); err != nil {
		return fmt.Errorf("egress report: %w: %s", err, tail(res.Stdout, 512))
	}
	return nil
}

// probeTimeout is how long an in-guest egress check waits. An emulated
// guest on a loaded host takes seconds for a TLS handshake.
func probeTimeout(a vmm.Accel) time.Duration {
	if a == vmm.TCG {
		return 8 * time.Second
	}
	return 0 // egresstest's default
}

// egressScript runs the probe with the spec in $SPEC, the guest's resolver
// (its gateway: the resolv.conf the guest agent wrote) put in for @GW@.
const egressScript = `GW=$(awk '$1=="nameserver"{print $2; exit}' /etc/resolv.conf)
echo "gw=$GW $(ip route show default | head -n1)" >&2
export ` + egresstest.ProbeEnv + `="$(printf '%s' "$SPEC" | sed "s/@GW@/$GW/g")"
unset SPEC
exec /workspace/egressprobe`

// egressInvocation runs the egress probe binary in a microVM guest under
// the truth table's tenant policy; "@GW@" in spec stands for the guest's
// gateway, known only inside the guest. Its stderr names the gateway and
// the default route the guest has.
func egressInvocation(id string, spec egresstest.ProbeSpec, probe []byte) *sandbox.Invocation {
	js, _ := json.Marshal(spec) // plain data: cannot fail
	return &sandbox.Invocation{
		ID: id, Tenant: "egress-probe",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", egressScript},
			Env:   []string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin", "SPEC=" + string(js)},
			Files: []sandbox.File{{Path: "egressprobe", Data: probe, Mode: 0o755}}},
		Limits: sandbox.Limits{Wall: 3 * time.Minute, Pids: 512},
		Policy: sandbox.Policy{Trust: sandbox.Hostile, Network: egresstest.TenantPolicy},
	}
}

// judgeEgress judges battery row id from the run (egresstest.Judge): the
// row's checks from inside the guest, 84's from a re-executed child there.
func judgeEgress(id int, r *egressRun) battery.Observation {
	if r.err != nil {
		return battery.Observation{Observed: r.err.Error()}
	}
	depth := "the guest"
	if id == 84 {
		depth = "a re-executed child in the guest"
	}
	v := egresstest.Judge(id, r.Run)
	tried := fmt.Sprintf("from %s (%s): %s", depth, r.gw, strings.Join(v.Checks, " "))
	if len(r.retried) > 0 {
		tried += fmt.Sprintf(" (second run: allowed checks %v timed out in the first)", r.retried)
	}
	return battery.Observation{Tried: tried, Observed: v.String(), Secure: v.Secure()}
}

// openVMNet is WeakOpenNetwork's NIC: a tap in the harness's upstream
// namespace, the guest on the servers' own network with the harness's DNS
// server as gateway and resolver, and nothing in between.
func (b *Backend) openVMNet() (*vmNet, error) {
	rig := b.cfg.rig
	if rig == nil {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "the %s control needs the egress harness", WeakOpenNetwork)
	}
	guest := netip.MustParsePrefix("10.213.200.9/24")
	undo := func() error {
		return netns.Do(rig.UpNetns, func() error {
			l, err := netlink.LinkByName(tapName)
			if err != nil {
				return nil
			}
			return netlink.LinkDel(l)
		})
	}
	err := netns.Do(rig.UpNetns, func() error {
		if err := netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tapName}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_DEFAULTS | netlink.TUNTAP_NO_PI}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(tapName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		// The guest's address, and the foreign source probe 83 spoofs.
		for _, dst := range []string{guest.Addr().String() + "/32", "10.213.0.99/32"} {
			_, n, _ := net.ParseCIDR(dst)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: n}); err != nil {
				return err
			}
		}
		return netns.Sysctl("net/ipv4/ip_forward", "1") // on to the stand-in host's services
	})
	if err != nil {
		return nil, errors.Join(sandbox.Wrap(sandbox.BackendFailure, err, "unfiltered NIC"), undo())
	}
	tap, err := openTap(rig.UpNetns, tapName)
	if err != nil {
		return nil, errors.Join(sandbox.Wrap(sandbox.BackendFailure, err, "open the unfiltered tap"), undo())
	}
	return &vmNet{tap: tap, mac: randomMAC(), guest: agent.VMNet{Addr: guest, Gateway: egresstest.DNSAddr}, undo: undo}, nil
}
