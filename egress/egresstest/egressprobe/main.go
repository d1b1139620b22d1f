// Command egressprobe is the egress truth table's in-sandbox probe
// (egresstest.RunProbe) as a static binary, for sandboxes that cannot run a
// test binary itself: a microVM guest has its own kernel and no host libc.
// egresstest.BuildProbe builds it.
package main

import (
	"fmt"
	"os"

	"github.com/wovyr/wovyr/egress/egresstest"
)

func main() {
	spec := os.Getenv(egresstest.ProbeEnv)
	if spec == "" {
		fmt.Fprintln(os.Stderr, "egressprobe: set", egresstest.ProbeEnv, "to a JSON ProbeSpec")
		os.Exit(2)
	}
	os.Exit(egresstest.RunProbe(spec))
}
