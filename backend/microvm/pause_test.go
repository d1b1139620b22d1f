package microvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/snapshot/snapshottest"
)

// TestPauseIsTheTenants is issue 17 item 7: a tenant's warm VM pauses whole
// (its files and identity kept, 0600 under the state dir), resumes for that
// tenant only — another tenant gets a typed error and nothing is restored —
// and the resumed VM runs that tenant's invocations only.
func TestPauseIsTheTenants(t *testing.T) {
	b := sibling(t, backend(t), func(c *Config) { c.Warm = true })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	first := inv("/bin/sh", "-c", "echo kept > /workspace/state; echo ok")
	first.Tenant = "acme"
	if res, err := s.Run(ctx, first); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("first run: %v %+v", err, res)
	}
	if _, err := s.(sandbox.Pauser).Pause(ctx, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) || sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("another tenant paused acme's VM: %v", err)
	}
	p, err := s.(sandbox.Pauser).Pause(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(snapshotsDir(b.cfg.StateDir), "paused", "microvm", p.ID)
	snapshottest.AssertPrivate(t, dir, goldenInfo, "meta.json", goldenScratch, goldenState)
	s.Destroy(ctx)

	vmsBefore, _ := filepath.Glob(filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-vm-*"))
	if _, err := b.Resume(ctx, p, "globex"); !errors.Is(err, sandbox.ErrWrongTenant) || sandbox.ClassOf(err) != sandbox.BadInput {
		t.Fatalf("globex resumed acme's paused VM: %v", err)
	}
	if vms, _ := filepath.Glob(filepath.Join(vmsDir(b.cfg.StateDir), "wovyr-vm-*")); len(vms) != len(vmsBefore) {
		t.Fatalf("a refused resume left VMs: %v", vms)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a refused resume touched the paused VM: %v", err)
	}

	r, err := b.Resume(ctx, p, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy(ctx)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the paused copy is gone before its Discard: %v", err)
	}
	if err := b.Discard(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the paused copy survives its Discard: %v", err)
	}
	other := inv("/bin/true")
	other.Tenant = "globex"
	if _, err := r.Run(ctx, other); !errors.Is(err, sandbox.ErrWrongTenant) {
		t.Fatalf("globex ran on acme's resumed VM: %v", err)
	}
	again := inv("/bin/sh", "-c", "cat /workspace/state /etc/machine-id; date +%s")
	again.Tenant = "acme"
	res, err := r.Run(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != 3 || lines[0] != "kept" || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(lines[1]) {
		t.Fatalf("resumed VM: %q %q", res.Stdout, res.Stderr)
	}
	if sec, _ := strconv.ParseInt(lines[2], 10, 64); !withinASecond(sec, res.Timings.Started, res.Timings.Finished) {
		t.Errorf("resumed clock %s outside the run", lines[2])
	}
	if skew := r.(*vmSandbox).skew; skew > maxClockSkew || skew < -maxClockSkew {
		t.Errorf("resumed clock is %s off the host's at thaw", skew)
	}
	if rs := r.(*vmSandbox); rs.ident.MachineID != lines[1] {
		t.Errorf("machine-id %s, the paused VM's %s", lines[1], rs.ident.MachineID)
	}

	// A session pauses and resumes many times: the identity it already
	// holds is left as it is, boot_id bound once, not once per resume.
	ident := r.(*vmSandbox).ident
	p2, err := r.(sandbox.Pauser).Pause(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Discard(ctx, p2)
	r.Destroy(ctx)
	r2, err := b.Resume(ctx, p2, "acme")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Destroy(ctx)
	held := inv("/bin/sh", "-c", "cat /etc/machine-id /proc/sys/kernel/random/boot_id; grep -c ' /proc/sys/kernel/random/boot_id ' /proc/self/mountinfo")
	held.Tenant = "acme"
	if res, err = r2.Run(ctx, held); err != nil {
		t.Fatal(err)
	}
	if want := ident.MachineID + "\n" + ident.BootID + "\n1\n"; string(res.Stdout) != want {
		t.Errorf("twice-resumed VM's identity and boot_id mounts %q, want %q (stderr %q)", res.Stdout, want, res.Stderr)
	}
}
