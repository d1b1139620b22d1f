package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/sandbox"
)

// The egress rows (BATTERY 71–84) for a container backend with an egress
// service. They run the truth table every backend shares
// (egresstest.TruthTable, the native backend's rows) once per configuration,
// inside a container sandbox, against a rig of its own: a stand-in host
// namespace and an upstream namespace with the allowed/denied servers, a
// recording DNS server and fake metadata (nothing leaves the machine). The
// backend's own egress service is not used: a copy of the backend is wired
// to a service on the rig. Each row judges its checks from that one run,
// together with every check that must succeed (so a run that reached
// nothing cannot pass).
//
// The probe is a static binary (egress/egresstest/egressprobe) shipped into
// the sandbox as a workload file: Config.EgressProbe.

// egressControls is each row's positive control.
var egressControls = map[int]battery.Weakness{
	71: EgressOpen, 72: EgressOpen, 73: EgressOpen, 74: EgressOpen, 75: EgressHostNetns, 76: EgressOpen,
	77: EgressOpen, 78: EgressOpen, 79: EgressOpen, 80: EgressOpen, 81: EgressOpen, 83: HostPrivileged, 84: EgressOpen,
}

// egressNA is why row 82 does not apply once a sandbox has a slot.
const egressNA82 = "AF_UNIX sockets in a container reach only its own mount namespace (row 10 finds no host socket in it) and abstract ones only its own slot's network namespace, which holds nothing else"

// slotOwnedRows are rows whose attack the slot itself defeats whatever the
// weakness: its netns belongs to the host's user namespace, so no
// capability in the container's reaches it (a net sysctl write, setns into
// it). Their positive controls run on a copy of the backend without a slot
// (a netns of the container's own, as before egress), which shows the probe
// detects the weakness where it can exist; the record names the control's
// configuration.
var slotOwnedRows = []int{12, 27}

func slotControls(b *Backend, probes []battery.Probe) {
	plain := b.withNetwork(nil)
	for i := range probes {
		if slices.Contains(slotOwnedRows, probes[i].ID) && probes[i].ControlOn == nil {
			probes[i].ControlOn = plain
		}
	}
}

// egressTag names the battery's rig and service (distinct from the tests').
const egressTag = "bat"

// egressProbes returns rows 71–84 for b, sharing one run per weakness.
func egressProbes(b *Backend) []battery.Probe {
	return egresstest.Probes(egressControls, b.name,
		"egress truth table in a container sandbox bound to the tenant allowlist, against an isolated rig",
		func(t battery.Target) (battery.Weakness, error) {
			tb, ok := t.Backend.(*Backend)
			if !ok {
				return "", errors.New("not an OCI backend")
			}
			return tb.weak, nil
		},
		func(ctx context.Context, t battery.Target) *egresstest.TableRun {
			return runEgressTable(ctx, t.Backend.(*Backend), t.Image)
		})
}

// runEgressTable runs the sandbox truth table on a copy of tb wired to the
// rig's service (egresstest.RunTable), in sandboxes of template img.
func runEgressTable(ctx context.Context, tb *Backend, img string) *egresstest.TableRun {
	probe, err := os.ReadFile(tb.cfg.EgressProbe)
	if err != nil {
		return &egresstest.TableRun{Err: fmt.Errorf("egress probe binary (build egress/egresstest/egressprobe with CGO_ENABLED=0): %w", err)}
	}
	return egresstest.RunTable(ctx, egressTag, img, probe, func(svc *egress.Service) func(context.Context) (egresstest.Prepared, error) {
		c := tb.withNetwork(svc)
		tmpl := sandbox.Template{Kind: sandbox.KindCommand, Image: img, Limits: sandbox.Limits{Pids: 512, Disk: 64 << 20}, Egress: true}
		return func(ctx context.Context) (egresstest.Prepared, error) {
			sb, err := c.Prepare(ctx, tmpl)
			if err != nil {
				return egresstest.Prepared{}, err
			}
			s := sb.(*Sandbox)
			return egresstest.Prepared{Sandbox: s, ID: s.id, Slot: s.net, ProbePath: workDir + "/egressprobe"}, nil
		}
	})
}
