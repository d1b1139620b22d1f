// Command egressprobe is the egress probe (egresstest.RunProbe) as its own
// static binary, for sandboxes whose root filesystem is not the host's (a
// container's template): build it with CGO_ENABLED=0 and put it in the
// template. It reads its spec from egresstest.ProbeEnv and prints the report.
package main

import (
	"fmt"
	"os"

	"github.com/wovyr/wovyr/egress/egresstest"
)

func main() {
	spec := os.Getenv(egresstest.ProbeEnv)
	if spec == "" {
		fmt.Fprintln(os.Stderr, "egressprobe: "+egresstest.ProbeEnv+" is not set")
		os.Exit(2)
	}
	os.Exit(egresstest.RunProbe(spec))
}
