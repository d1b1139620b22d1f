package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/backend/wasm"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/store"
)

// certifyMain is `wovyr certify`: run the battery for one or every
// available backend and store the certification records.
func certifyMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("certify", flag.ContinueOnError)
	only := fs.String("backend", "", "certify only this backend (default: every available one)")
	jsonOut := fs.Bool("json", false, "print the records as JSON")
	markdown := fs.String("markdown", "", "also write the probe × backend table of every stored record to this file")
	configFile := fs.String("config", "", "certify the backends as `serve --config` this file builds them (with egress.enabled: allowlisted egress and the egress rows)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *configFile != "" {
		// The daemon's configuration: root's (egress needs it).
		if code := refuseUnlessRoot("wovyr certify --config"); code != 0 {
			return code
		}
	}
	network, code := certifyNetwork(ctx, g, *configFile)
	if code != 0 {
		return code
	}
	if network != nil {
		defer network.Close(context.WithoutCancel(ctx))
	}
	n, err := openNodeWith(g, network)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	defer n.Close()
	guest := ""
	if !unprivileged() { // without root only wasm's battery runs, which needs no guest
		var cleanup func()
		if guest, cleanup, err = battery.StageGuest(g.guest); err != nil {
			fmt.Fprintf(os.Stderr, "wovyr: the battery needs the static wovyr-guest binary (--guest or WOVYR_GUEST): %v\n", err)
			return exitBackendFailure
		}
		defer cleanup()
	}
	suites, err := n.suites(guest)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	if *only != "" {
		if _, ok := n.mgr.Backend(*only); !ok {
			fmt.Fprintf(os.Stderr, "wovyr: unknown backend %q\n", *only)
			return exitBadInput
		}
	}
	var progress io.Writer = os.Stderr
	if *jsonOut {
		progress = nil
	}
	var recs []cert.Record
	code = 0
	for _, b := range n.mgr.Backends() {
		if *only != "" && b.Name() != *only {
			continue
		}
		suite, ok := suites[b.Name()]
		if !ok {
			fmt.Fprintf(os.Stderr, "wovyr: %s: no battery suite yet\n", b.Name())
			continue
		}
		if progress != nil {
			fmt.Fprintf(progress, "== %s\n", b.Name())
		}
		rec, err := battery.Run(ctx, suite, progress)
		if nr := (*battery.NotRunError)(nil); errors.As(err, &nr) {
			// Something the battery needs is missing: no verdict on the
			// backend, so nothing is recorded (a record listing every
			// probe as failed would read as "this machine is insecure").
			fmt.Fprintf(os.Stderr, "wovyr: %s: not certified, the battery did not run: %s\n", b.Name(), nr.Reason)
			if *only != "" {
				code = exitBackendFailure
			}
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "wovyr: %s: %v\n", b.Name(), err)
			if *only != "" {
				code = exitBackendFailure
			}
			continue
		}
		if err := n.withStore(func(s *store.Store) error { return s.PutCert(rec) }); err != nil {
			fmt.Fprintln(os.Stderr, "wovyr: store:", err)
			return exitBackendFailure
		}
		recs = append(recs, rec)
		if !rec.Passed {
			code = exitBackendFailure
		}
		if progress != nil {
			fmt.Fprintf(progress, "%s: %s\n", b.Name(), verdict(rec))
		}
	}
	if *jsonOut {
		printJSON(recs)
	}
	if *markdown != "" {
		if err := writeBatteryReport(n, *markdown); err != nil {
			fmt.Fprintln(os.Stderr, "wovyr:", err)
			return exitBackendFailure
		}
	}
	return code
}

func verdict(r cert.Record) string {
	applied, na := 0, 0
	for _, o := range r.Outcomes {
		if o.Applies {
			applied++
		} else {
			na++
		}
	}
	if r.Passed {
		return fmt.Sprintf("certified (%d probes passed with flagged controls, %d rows not applicable)", applied, na)
	}
	return fmt.Sprintf("NOT certified: %v", r.Failed())
}

// suites returns the battery suite of each backend on this node.
// With egress (n.network), the microVM and native suites add the egress
// rows, whose static probe (wovyr-egressprobe, next to the executable like
// the container backend's default) goes into the guest or the workspace;
// the container suite adds them by itself.
func (n *node) suites(guest string) (map[string]battery.Suite, error) {
	if unprivileged() {
		// The stand-ins' suites stop at their probe: not run, needs root.
		suites := map[string]battery.Suite{wasm.Name: wasm.Suite(n.wasm)}
		for _, b := range n.backends {
			if _, ok := b.(rootOnly); ok {
				suites[b.Name()] = battery.Suite{Target: battery.Target{Backend: b}}
			}
		}
		return suites, nil
	}
	suites := map[string]battery.Suite{
		"native": native.Suite(n.native, guest),
		"wasm":   wasm.Suite(n.wasm),
	}
	for _, b := range n.oci {
		suites[b.Name()] = oci.Suite(b, "")
	}
	// The microVM's rows that no VM configuration weakens take their
	// controls from the container suite (microvm.Suite).
	controls := suites["container"]
	suites["microvm"] = microvm.Suite(n.microvm, controls)
	if n.network != nil {
		probe, err := os.ReadFile(egressProbePath())
		if err != nil {
			return nil, fmt.Errorf("the egress rows need the static egress probe: %w", err)
		}
		suites["microvm"] = microvm.EgressSuite(n.microvm, controls, probe)
		suites["native"] = native.EgressSuite(n.native, guest, probe)
	}
	return suites, nil
}

// egressProbePath is wovyr-egressprobe next to the running executable.
func egressProbePath() string { return besideExecutable("wovyr-egressprobe") }

// certifyNetwork starts the egress service the config file enables, as
// serve does, so that the records certify the daemon's configuration.
func certifyNetwork(ctx context.Context, g *globals, file string) (*egress.Service, int) {
	if file == "" {
		return nil, 0
	}
	cfg, err := config.Load(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return nil, exitBadInput
	}
	network, err := startEgress(ctx, cfg.Egress, g.logger())
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return nil, exitBackendFailure
	}
	return network, 0
}

// writeBatteryReport writes docs/BATTERY.md-style output from every stored
// certification.
func writeBatteryReport(n *node, path string) error {
	var all []cert.Record
	if err := n.withStore(func(s *store.Store) error {
		var err error
		all, err = s.Certs()
		return err
	}); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "# Escape battery results\n\nGenerated by `wovyr certify --markdown %s` from the newest certification of each backend on each runtime on this node (`wovyr --container-runtime runc certify --backend container` adds the container backend on runc; `wovyr certify --config FILE`, with a config that enables egress, adds the configurations with allowlisted egress).\n\n", path)
	battery.WriteMarkdown(f, all)
	return f.Close()
}
