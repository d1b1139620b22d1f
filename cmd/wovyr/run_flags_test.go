package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/resource"
	"github.com/wovyr/wovyr/sandbox"
)

// Issue #25 item 4: the 1 MiB default output cap could not be raised from
// the CLI, though the API's limits.output could.
func TestRunOutputFlagRaisesTheCap(t *testing.T) {
	script := `head -c 3000000 /dev/zero | tr '\0' a`
	o := wovyr(t, "", "run", "--trust", "trusted", "--", "/bin/sh", "-c", script)
	if len(o.stdout) != sandbox.DefaultOutput || !strings.Contains(o.stderr, "output truncated (stdout true") {
		t.Fatalf("default cap: %d bytes, stderr %q", len(o.stdout), o.stderr)
	}
	o = wovyr(t, "", "run", "--trust", "trusted", "--output", "4M", "--", "/bin/sh", "-c", script)
	if o.code != 0 || len(o.stdout) != 3000000 || o.stderr != "" {
		t.Fatalf("--output 4M: exit %d, %d bytes, stderr %q", o.code, len(o.stdout), o.stderr)
	}
	o = wovyr(t, "", "run", "--trust", "trusted", "--output", "65M", "--", "/bin/true")
	if o.code != exitBadInput || !strings.Contains(o.stderr, "limits.output") {
		t.Fatalf("--output over the ceiling: %+v", o)
	}
}

func TestRunCollectWritesFilesUnderCollectDir(t *testing.T) {
	dir := t.TempDir()
	o := wovyr(t, "", "run", "--trust", "trusted", "--collect", "out/r.txt", "--collect-dir", dir,
		"--", "/bin/sh", "-c", "mkdir out && echo result > out/r.txt")
	if o.code != 0 {
		t.Fatalf("%+v", o)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "r.txt")); err != nil || string(b) != "result\n" {
		t.Fatalf("collected file: %q %v", b, err)
	}
}

// Every invocation field a user sets has a flag; this pins the mapping.
func TestRunFlagsReachTheInvocation(t *testing.T) {
	c := &runCmd{trust: "untrusted", tenant: "local", more: invocationFlags{
		image: "py", output: "8M", disk: "256M", cpu: 3 * time.Second, nofile: 512, fuel: 9,
		cpus: 0.5, gpus: 1, allow: multiFlag{"example.com:443", "udp:10.0.0.0/8:53,5353", "[fd00::/8]:80"},
		collect: multiFlag{"a.txt"},
	}}
	inv, err := c.invocation([]string{"/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	wantLimits := sandbox.Limits{Output: 8 << 20, Disk: 256 << 20, CPU: 3 * time.Second, NoFile: 512, Fuel: 9}
	wantAllow := []netpolicy.Rule{{Host: "example.com", Ports: []uint16{443}},
		{CIDR: "10.0.0.0/8", Ports: []uint16{53, 5353}, Protocol: "udp"}, {CIDR: "fd00::/8", Ports: []uint16{80}}}
	if inv.Workload.Image != "py" || inv.Limits != wantLimits || !reflect.DeepEqual(inv.Policy.Network.Allow, wantAllow) ||
		inv.Resources.Vector != (resource.Vector{CPUMillis: 500, GPU: 1}) || !reflect.DeepEqual(inv.Workload.Collect, []string{"a.txt"}) {
		t.Fatalf("invocation: image %q limits %+v allow %+v resources %+v collect %v",
			inv.Workload.Image, inv.Limits, inv.Policy.Network.Allow, inv.Resources, inv.Workload.Collect)
	}
	for _, bad := range []string{"example.com", "example.com:http", "[fd00::/8]443", "udp:example.com:53"} {
		c := &runCmd{trust: "trusted", tenant: "local", more: invocationFlags{allow: multiFlag{bad}}}
		if _, err := c.invocation([]string{"/bin/true"}); sandbox.ClassOf(err) != sandbox.BadInput {
			t.Errorf("--allow %q: %v, want bad-input", bad, err)
		}
	}
}
