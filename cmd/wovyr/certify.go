package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/store"
)

// certifyMain is `wovyr certify`: run the battery for one or every
// available backend and store the certification records.
func certifyMain(ctx context.Context, g *globals, args []string) int {
	fs := flag.NewFlagSet("certify", flag.ContinueOnError)
	only := fs.String("backend", "", "certify only this backend (default: every available one)")
	jsonOut := fs.Bool("json", false, "print the records as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	n, err := openNode(g)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wovyr:", err)
		return exitBackendFailure
	}
	guest, cleanup, err := battery.StageGuest(g.guest)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wovyr: the battery needs the static wovyr-guest binary (--guest or WOVYR_GUEST): %v\n", err)
		return exitBackendFailure
	}
	defer cleanup()
	suites := n.suites(guest)
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
	code := 0
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
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(recs)
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
func (n *node) suites(guest string) map[string]battery.Suite {
	suites := map[string]battery.Suite{
		"native": native.Suite(n.native, guest),
	}
	for _, b := range n.oci {
		suites[b.Name()] = oci.Suite(b, "")
	}
	return suites
}
