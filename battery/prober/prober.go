// Package prober is the in-sandbox half of the escape battery: attacks and
// exhaustion attempts that run *inside* a sandbox and report exactly what
// they observed as one JSON line on stdout. It is compiled into the static
// wovyr-guest binary (CGO_ENABLED=0), so the same code runs in a host
// process, a container rootfs and a microVM guest.
//
// A probe never decides pass or fail: it reports counts, errnos and bytes.
// The host-side battery compares them with the exact secure outcome for the
// backend, and with what the same probe saw under a weakened configuration.
package prober

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sort"
	"strconv"
)

// Report is what a probe prints.
type Report struct {
	Probe string            `json:"probe"`
	Count int               `json:"count,omitempty"` // how far it got (forks, bytes, files, fds)
	Errno string            `json:"errno,omitempty"` // what stopped it
	Data  map[string]string `json:"data,omitempty"`
	Exit  int               `json:"-"` // the process's exit code (zero for most probes)
}

// Func is one probe. args are probe-specific; it writes its Report itself
// only through the returned value.
type Func func(args []string) Report

// Probes lists every in-sandbox probe by name.
func Probes() map[string]Func {
	m := map[string]Func{
		"forkbomb": forkBomb,
		"memhog":   memHog,
		"diskfill": diskFill,
		"inodes":   inodes,
		"fds":      fds,
		"spin":     spin,
		"sleep":    sleep,
		"flood":    flood,
		"daemon":   daemon,
		"connect":  connect,
		"self":     self,
		"readfile": readFile,
		"kill":     killPid,
		"canary":   canary,
		"peek":     peek,
		"listen":   listen,
		"exchange": exchange,
		"ipcput":   ipcPut,
		"ipcget":   ipcGet,
		"kgrow":    kgrow,
		"threads":  threads,
		"traceme":  traceme,
		"gpunodes": gpuNodes,
		"gpuhold":  gpuHold,
	}
	maps.Copy(m, kernelProbes())
	return m
}

// Main runs the probe named by args[0] and prints its report. It returns
// the process exit code.
func Main(args []string, stdout io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stdout, `{"error":"usage: probe NAME [ARGS]"}`)
		return 2
	}
	fn, ok := Probes()[args[0]]
	if !ok {
		names := make([]string, 0, len(Probes()))
		for n := range Probes() {
			names = append(names, n)
		}
		sort.Strings(names)
		b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("unknown probe %q; have %v", args[0], names)})
		fmt.Fprintln(stdout, string(b))
		return 2
	}
	rep := fn(args[1:])
	rep.Probe = args[0]
	b, _ := json.Marshal(rep)
	fmt.Fprintln(stdout, string(b))
	return rep.Exit
}

// intArg returns args[i] as an int, or def.
func intArg(args []string, i, def int) int {
	if i < len(args) {
		if n, err := strconv.Atoi(args[i]); err == nil {
			return n
		}
	}
	return def
}

func strArg(args []string, i int, def string) string {
	if i < len(args) {
		return args[i]
	}
	return def
}

func errnoName(err error) string {
	if err == nil {
		return ""
	}
	return unwrapErrno(err)
}
