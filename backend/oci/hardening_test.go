package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

func testSpec(t *testing.T) *specs.Spec {
	t.Helper()
	s, err := buildSpec(specParams{rootfs: "/r", agent: "/a", cgroups: "/wovyr/_pool/x",
		ids: idmap.Range{HostUID: 1 << 31, HostGID: 1 << 31, Size: rangeSize}, limits: sandbox.Limits{}.WithDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLintSpecPositiveControls: our spec is clean, and each deliberate
// weakening is reported — so the lint cannot pass by doing nothing.
func TestLintSpecPositiveControls(t *testing.T) {
	if bad := LintSpec(testSpec(t), runscFlags("systrap")); len(bad) > 0 {
		t.Fatalf("generated spec flagged: %v", bad)
	}
	weaken := map[string]func(s *specs.Spec) []string{
		"CAP_SYS_ADMIN": func(s *specs.Spec) []string {
			s.Process.Capabilities.Bounding = []string{"CAP_SYS_ADMIN"}
			return nil
		},
		"no_new_privileges": func(s *specs.Spec) []string { s.Process.NoNewPrivileges = false; return nil },
		"user namespace": func(s *specs.Spec) []string {
			s.Linux.Namespaces = s.Linux.Namespaces[:5]
			return nil
		},
		"host root":  func(s *specs.Spec) []string { s.Linux.UIDMappings[0].HostID = 0; return nil },
		"pids limit": func(s *specs.Spec) []string { s.Linux.Resources.Pids = nil; return nil },
		"seccomp":    func(s *specs.Spec) []string { s.Linux.Seccomp = nil; return nil },
		"io_uring": func(s *specs.Spec) []string {
			s.Linux.Seccomp.Syscalls[0].Names = s.Linux.Seccomp.Syscalls[0].Names[3:]
			s.Linux.Seccomp.Syscalls = append(s.Linux.Seccomp.Syscalls, specs.LinuxSyscall{Names: []string{"io_uring_setup"}, Action: specs.ActAllow})
			return nil
		},
		"host bind": func(s *specs.Spec) []string {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host", Source: "/", Type: "bind"})
			return nil
		},
		"kcore":          func(s *specs.Spec) []string { s.Linux.MaskedPaths = nil; return nil },
		"--network=host": func(s *specs.Spec) []string { return []string{"--network=host"} },
		"annotation": func(s *specs.Spec) []string {
			s.Annotations = map[string]string{"dev.gvisor.flag.network": "host"}
			return nil
		},
	}
	for name, f := range weaken {
		s := testSpec(t)
		flags := f(s)
		if bad := LintSpec(s, flags); len(bad) == 0 {
			t.Errorf("weakened spec (%s) passed the lint", name)
		}
	}
}

// TestWorkloadPosture runs escape attempts inside each backend; each must
// fail with the exact secure outcome.
func TestWorkloadPosture(t *testing.T) {
	script := strings.Join([]string{
		`mount -t tmpfs x /mnt 2>/dev/null && echo MOUNTED`,
		`unshare -U true 2>/dev/null && echo UNSHARED`,
		`echo x > /proc/sysrq-trigger 2>/dev/null && echo SYSRQ`,
		`cat /proc/kcore 2>/dev/null | head -c1 | grep -q . && echo KCORE`,
		`ls /sys/firmware 2>/dev/null | grep -q . && echo FIRMWARE`,
		`ip link 2>/dev/null | grep -v ' lo' | grep -q '^[0-9]' && echo NIC`,
		`hostname`,
		`echo done`,
	}, "; ")
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			res := run(t, b, cmd("/bin/sh", "-c", script))
			out := string(res.Stdout)
			if out != "wovyr\ndone\n" {
				t.Fatalf("posture: got %q (stderr %q), want only hostname and done", out, res.Stderr)
			}
		})
	}
}

func TestGVisorKernel(t *testing.T) {
	res := run(t, newBackends(t)["gvisor"], cmd("/bin/dmesg"))
	if !strings.Contains(string(res.Stdout), "gVisor") {
		t.Fatalf("dmesg shows no gVisor kernel: %q", res.Stdout)
	}
}

func TestFilesInAndCollect(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", "tr a-z A-Z < in.txt > out.txt; ln -s /etc/passwd esc; cat in.txt")
			inv.Workload.Files = []sandbox.File{{Path: "in.txt", Data: []byte("hello")}}
			inv.Workload.Collect = []string{"out.txt", "esc", "missing"}
			inv.Workload.Stdin = []byte("ignored")
			res := run(t, b, inv)
			if string(res.Stdout) != "hello" || len(res.Files) != 1 || res.Files[0].Path != "out.txt" || string(res.Files[0].Data) != "HELLO" {
				t.Fatalf("stdout %q files %+v stderr %q", res.Stdout, res.Files, res.Stderr)
			}
		})
	}
}

// TestLargeFilesIn: files of a megabyte or more reach the workspace through
// the job directory, not the agent's protocol, and arrive exactly as small
// ones do: the same bytes, mode and owner, at the top of the workspace or
// below it, counted once against the disk, and nothing left behind in the
// job directory or on the host.
func TestLargeFilesIn(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			top, below := bytes.Repeat([]byte("wovyr"), 3<<20/5), bytes.Repeat([]byte{7}, hostPlaced)
			inv := cmd("/bin/sh", "-c", "sha256sum big.bin d/e/below.bin | cut -c1-64; stat -c '%a %u' big.bin d/e/below.bin; ls -A /.wovyr/job; echo more >> big.bin")
			inv.Workload.Files = []sandbox.File{{Path: "big.bin", Data: top, Mode: 0o640}, {Path: "d/e/below.bin", Data: below, Mode: 0o444},
				{Path: "small", Data: []byte("x")}}
			inv.Limits.Disk = int64(len(top)+len(below)) + 1<<20 // both once, with a little room
			res := run(t, b, inv)
			want := fmt.Sprintf("%x\n%x\n640 0\n444 0\n", sha256.Sum256(top), sha256.Sum256(below))
			if string(res.Stdout) != want || len(res.Stderr) != 0 {
				t.Fatalf("stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
			}

			// The large ones went by the job directory, owned by the
			// sandbox's root, and are gone from it when the job is over.
			ctx := context.Background()
			sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(ctx)
			s := sb.(*Sandbox)
			job := agent.Job{ID: "j1"}
			done, err := s.placeFiles(inv.Workload.Files, &job)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range job.Files {
				if large := i < 2; large != (f.From != "") || large != (f.Data == nil) {
					t.Fatalf("file %s: from %q, %d bytes of data", f.Path, f.From, len(f.Data))
				}
			}
			host := filepath.Join(s.dir, "rootfs", job.Files[0].From)
			fi, err := os.Stat(host)
			if err != nil || fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Uid != s.slot.ids.HostUID || fi.Size() != int64(len(top)) {
				t.Fatalf("placed file: %v %v", fi, err)
			}
			done()
			if _, err := os.Lstat(host); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("placed file left after the job: %v", err)
			}
		})
	}
}

func TestRefusesWhatItCannotEnforce(t *testing.T) {
	b := newBackends(t)["container"]
	ctx := context.Background()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	inv := cmd("true")
	inv.Policy.Network = netpolicy.Policy{Allow: []netpolicy.Rule{{CIDR: "192.0.2.0/24", Ports: []uint16{443}}}}
	if _, err := sb.Run(ctx, inv); !errors.Is(err, sandbox.Unenforceable) {
		t.Fatalf("allowlist policy: err %v, want unenforceable", err)
	}
	inv = cmd("true")
	inv.Workload.Image = "other"
	if _, err := sb.Run(ctx, inv); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("image mismatch: err %v, want bad-input", err)
	}
	if _, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "nope"}); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("missing image: err %v, want bad-input", err)
	}
	if _, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand, Image: "../x"}); !errors.Is(err, sandbox.BadInput) {
		t.Fatalf("bad image name: err %v, want bad-input", err)
	}
}

// TestReconcileRemovesAbandoned simulates a crashed owner: a sandbox whose
// lock is dropped without Destroy must be removed completely, while a live
// sandbox next to it is left alone.
func TestReconcileRemovesAbandoned(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			live, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				t.Fatal(err)
			}
			defer live.Destroy(ctx)
			sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				t.Fatal(err)
			}
			s := sb.(*Sandbox)
			// Crash: the owner's locks vanish, nothing is torn down.
			s.lock.Close()
			s.slot.release()
			if _, err := Reconcile(ctx, b.cfg.StateDir); err != nil {
				t.Fatal(err)
			}
			assertNoLeftovers(t, b, s)
			if _, err := os.Stat(filepath.Join(b.run, "sb", live.(*Sandbox).id)); err != nil {
				t.Fatalf("reconcile removed a live sandbox: %v", err)
			}
			res, err := live.Run(ctx, cmd("echo", "alive"))
			if err != nil || string(res.Stdout) != "alive\n" {
				t.Fatalf("live sandbox after reconcile: %v %q", err, res.Stdout)
			}
		})
	}
}

func TestSpecIsWrittenForRuntime(t *testing.T) {
	b := newBackends(t)["container"]
	ctx := context.Background()
	sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	js, err := os.ReadFile(filepath.Join(sb.(*Sandbox).dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(js, &s); err != nil {
		t.Fatal(err)
	}
	if bad := LintSpec(&s, sb.(*Sandbox).d.flags); len(bad) > 0 {
		t.Fatalf("bundle spec flagged: %v", bad)
	}
}

// TestWorkloadCannotReachAgentFDs pins a bug: the workload (same uid as the
// agent) could open /proc/1/fd/2, a host file, and grow it without bound,
// or read/write the job stream through /proc/1/fd/0 and 1.
func TestWorkloadCannotReachAgentFDs(t *testing.T) {
	// runsc does not apply dumpability to procfs fd access (see the
	// package doc): only runc/crun are held to it here. Pooled: a
	// one-shot workload is pid 1 itself (oneshot.go).
	cfg := testConfig(t)
	cfg.Pooled = true
	b, err := NewContainer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, b, cmd("/bin/sh", "-c",
		`for fd in 0 1 2; do echo x >> /proc/1/fd/$fd 2>/dev/null && echo W$fd; head -c1 /proc/1/fd/$fd >/dev/null 2>&1 </dev/null && echo R$fd; readlink /proc/1/fd/$fd >/dev/null 2>&1 && echo L$fd; done; echo end`))
	if got := strings.TrimSpace(string(res.Stdout)); got != "end" {
		t.Fatalf("workload reached the agent's descriptors: %q (stderr %q)", got, res.Stderr)
	}
}
