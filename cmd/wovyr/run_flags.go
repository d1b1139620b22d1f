package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// invocationFlags are the invocation fields a user sets on `wovyr run`
// beyond trust, backend and the basic limits: every field of the API's
// invocation that a caller chooses has a flag (issue #25: the CLI lacked
// --image and --output, so the 1 MiB output cap could not be raised).
type invocationFlags struct {
	image          string
	output, disk   string
	cpu            time.Duration
	nofile         int
	fuel           uint64
	cpus           float64
	gpus           int64
	allow, collect multiFlag
	collectDir     string
}

func (f *invocationFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.image, "image", "", "root filesystem template for container, gvisor and microvm (default: the backend's default; see wovyr image list; microvm builds its root disk on first use)")
	fs.StringVar(&f.output, "output", "", "bytes of stdout and of stderr kept, each, e.g. 8M (default 1M, at most 64M)")
	fs.StringVar(&f.disk, "disk", "", "writable bytes (workspace, file size), e.g. 256M (default 64M)")
	fs.DurationVar(&f.cpu, "cpu", 0, "CPU-time limit, e.g. 10s (default: only --timeout bounds it)")
	fs.IntVar(&f.nofile, "nofile", 0, "open-file limit (default 256)")
	fs.Uint64Var(&f.fuel, "fuel", 0, "wasm fuel (default: unmetered)")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU cores reserved for scheduling, e.g. 0.5")
	fs.Int64Var(&f.gpus, "gpus", 0, "GPU devices, each held alone and scrubbed after (needs --remote: the daemon assigns devices; never below the trust floor)")
	fs.Var(&f.allow, "allow", "egress allow rule [udp:]HOST|CIDR:PORT[,PORT...], e.g. example.com:443, 10.0.0.0/8:80, '[fd00::/8]:443' (repeatable; default: no egress)")
	fs.Var(&f.collect, "collect", "workspace PATH to return after the run (repeatable; needs root, as --file does); written under --collect-dir, or in the --json result")
	fs.StringVar(&f.collectDir, "collect-dir", ".", "directory the --collect files are written to (without --json)")
}

// apply sets inv's fields from the flags; a bad value is BadInput.
func (f *invocationFlags) apply(inv *sandbox.Invocation) error {
	inv.Workload.Image = f.image
	for _, s := range []struct {
		name, val string
		dst       *int64
	}{{"output", f.output, &inv.Limits.Output}, {"disk", f.disk, &inv.Limits.Disk}} {
		if s.val == "" {
			continue
		}
		n, err := parseSize(s.val)
		if err != nil {
			return sandbox.Errorf(sandbox.BadInput, s.name, "%v", err)
		}
		*s.dst = n
	}
	if f.nofile < 0 {
		return sandbox.Errorf(sandbox.BadInput, "nofile", "must not be negative")
	}
	if f.cpus < 0 || f.gpus < 0 {
		return sandbox.Errorf(sandbox.BadInput, "cpus", "--cpus and --gpus must not be negative")
	}
	inv.Limits.CPU, inv.Limits.NoFile, inv.Limits.Fuel = f.cpu, f.nofile, f.fuel
	inv.Resources.CPUMillis, inv.Resources.GPU = int64(f.cpus*1000), f.gpus
	for _, a := range f.allow {
		r, err := parseAllow(a)
		if err != nil {
			return sandbox.Errorf(sandbox.BadInput, "allow", "%v", err)
		}
		inv.Policy.Network.Allow = append(inv.Policy.Network.Allow, r)
	}
	inv.Workload.Collect = append(inv.Workload.Collect, f.collect...)
	return nil
}

// parseAllow parses [udp:|tcp:]HOST|CIDR:PORT[,PORT...]; an IPv6 CIDR is
// bracketed. Whether the host or CIDR is valid is netpolicy's to say.
func parseAllow(s string) (netpolicy.Rule, error) {
	var r netpolicy.Rule
	rest := s
	for _, p := range []string{"udp:", "tcp:"} {
		if strings.HasPrefix(rest, p) {
			r.Protocol, rest = strings.TrimSuffix(p, ":"), rest[len(p):]
		}
	}
	var target, ports string
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return r, fmt.Errorf("rule %q: want [CIDR]:PORT", s)
		}
		target, ports = rest[1:end], rest[end+2:]
	} else {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return r, fmt.Errorf("rule %q: want HOST:PORT or CIDR:PORT", s)
		}
		target, ports = rest[:i], rest[i+1:]
	}
	for _, p := range strings.Split(ports, ",") {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return r, fmt.Errorf("rule %q: bad port %q", s, p)
		}
		r.Ports = append(r.Ports, uint16(n))
	}
	if strings.Contains(target, "/") {
		r.CIDR = target
	} else {
		r.Host = target
	}
	return r, nil
}

// writeCollected writes the result's collected files under dir, confined
// to it (the paths were validated as relative and clean by the sandbox).
func writeCollected(dir string, files []sandbox.File) error {
	for _, f := range files {
		if err := sandbox.ValidatePath(f.Path); err != nil {
			return sandbox.Errorf(sandbox.BackendFailure, "collect", "result file %q: %v", f.Path, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return sandbox.Wrap(sandbox.BadInput, err, "collect-dir")
		}
		mode := os.FileMode(f.Mode & 0o777)
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(dst, f.Data, mode); err != nil {
			return sandbox.Wrap(sandbox.BadInput, err, "collect-dir")
		}
	}
	return nil
}
