package native

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/sandbox"
)

// The egress rows (BATTERY 71–84) for a native backend with an egress
// service. Each configuration (the target and every control's weakness)
// runs the truth table once, through a copy of the backend wired to a
// service on a rig of its own (package egresstest: a stand-in host and an
// upstream namespace, nothing leaves the machine) — never the daemon's own
// service, whose uplink is real. Every row is judged from that one run by
// egresstest.Judge, as on the container and microVM backends.

// Weaknesses of the egress wiring, for the positive controls.
const (
	// EgressOpen: the slot is bound to egresstest.OpenPolicy instead of
	// the tenant's allowlist.
	EgressOpen battery.Weakness = "egress-open"
	// EgressHostNetns: the workload runs in the egress service's host
	// namespace instead of its slot (no host-side table in the way).
	EgressHostNetns battery.Weakness = "egress-host-netns"
)

// egressControls is each row's positive control. 83's is root in the
// slot: it may change the slot's namespace, which the unprivileged
// workload may not.
var egressControls = map[int]battery.Weakness{
	71: EgressOpen, 72: EgressOpen, 73: EgressOpen, 74: EgressOpen, 75: EgressHostNetns, 76: EgressOpen,
	77: EgressOpen, 78: EgressOpen, 79: EgressOpen, 80: EgressOpen, 81: EgressOpen, 83: battery.RunAsRoot, 84: EgressOpen,
}

// egressNA82 is why row 82 does not apply with a slot either.
const egressNA82 = "native applies no syscall filter and shares the host's filesystem by design (rows 20-43, 46); " +
	"AF_UNIX sockets are no way out of the slot's allowlist: path sockets are the host's files under the workload's own uid, abstract ones live in the slot's network namespace, which holds nothing else"

// egressTag names the battery's rig and service (distinct from the tests').
const egressTag = "nbt"

// EgressSuite is Suite(b, guest) plus the egress rows, for a backend with
// Config.Network: probe is the static egress probe binary
// (egresstest.BuildProbe), shipped into each sandbox as a workload file.
// Without Config.Network it is Suite: every egress row reduces to row 70.
func EgressSuite(b *Backend, guest string, probe []byte) battery.Suite {
	s := Suite(b, guest)
	if b.net == nil {
		return s
	}
	s.NotApplicable[82] = egressNA82
	for id := range egressControls {
		delete(s.NotApplicable, id)
	}
	s.Probes = append(s.Probes, egresstest.Probes(egressControls, "native",
		"egress truth table from a native sandbox (and a re-executed child) bound to the tenant allowlist, against an isolated rig",
		func(t battery.Target) (battery.Weakness, error) {
			tb, ok := t.Backend.(*Backend)
			if !ok {
				return "", errors.New("not a native backend")
			}
			return tb.weak, nil
		},
		func(ctx context.Context, t battery.Target) *egresstest.TableRun {
			return runEgress(ctx, t.Backend.(*Backend), probe)
		})...)
	return s
}

// netCert is the network part of the config hash. A slot is certified by
// the egress rows, which a certification without them never ran.
func (b *Backend) netCert() string {
	if b.net == nil {
		return b.netKind()
	}
	return b.netKind() + " rows=71-84"
}

// runEgress runs the sandbox truth table on a copy of tb wired to the
// rig's service (egresstest.RunTable).
func runEgress(ctx context.Context, tb *Backend, probe []byte) *egresstest.TableRun {
	return egresstest.RunTable(ctx, egressTag, "", probe, func(svc *egress.Service) func(context.Context) (egresstest.Prepared, error) {
		c := *tb
		c.net = svc
		return func(ctx context.Context) (egresstest.Prepared, error) {
			sb, err := c.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				return egresstest.Prepared{}, err
			}
			s := sb.(*nativeSandbox)
			return egresstest.Prepared{Sandbox: s, ID: s.id, Slot: s.slot, ProbePath: filepath.Join(s.dir, "egressprobe")}, nil
		}
	})
}
