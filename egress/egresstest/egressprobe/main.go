// Command egressprobe is the egress truth table's in-sandbox probe
// (egresstest.RunProbe) as a static binary, for sandboxes whose root
// filesystem is not the host's: a container's template, a microVM guest.
// egresstest.BuildProbe builds it (CGO_ENABLED=0). It reads its spec from
// egresstest.ProbeEnv and prints the report.
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
