// Package sandboxtest is the conformance suite every backend must pass: the
// same cases, with the same exact expectations, run against each backend
// from that backend's own tests (as wazero runs its spec tests per engine).
//
// The cases use only /bin/sh and coreutils-level tools that busybox also
// provides, so they run in a host process, a container rootfs or a guest.
package sandboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/sandbox"
)

// Options adapts the suite to a backend.
type Options struct {
	// Template is passed to Prepare. Its Kind defaults to KindCommand.
	Template sandbox.Template
	// Trust is the invocation's trust class (default Trusted).
	Trust sandbox.TrustClass
	// Image is set on every workload (for backends with root filesystems).
	Image string
	// Skip names cases that do not apply, with the reason, e.g.
	// {"Files": "no workspace"}. A skipped case is reported, not hidden.
	Skip map[string]string
}

// Run runs every conformance case against b.
func Run(t *testing.T, b sandbox.Backend, opt Options) {
	runCases(t, b, opt, []testCase[*harness]{
		{"EchoExit", caseEchoExit},
		{"EnvExact", caseEnvExact},
		{"Stdin", caseStdin},
		{"OutputCap", caseOutputCap},
		{"TimeoutKillsDescendants", caseTimeout},
		{"Files", caseFiles},
		{"BadInput", caseBadInput},
		{"NotStarted", caseNotStarted},
		{"EgressUnenforceable", caseEgress},
		{"DestroyIdempotent", caseDestroyTwice},
	}, func(t *testing.T, opt Options) *harness { return &harness{b: b, opt: opt} })
}

// testCase is one named case run on what mk of runCases makes (H).
type testCase[H any] struct {
	name string
	fn   func(t *testing.T, h H)
}

// runCases runs each case as a subtest on a fresh mk(t, opt), opt's
// defaults filled in, skipping (and saying so) what opt.Skip names.
func runCases[H any](t *testing.T, b sandbox.Backend, opt Options, cases []testCase[H], mk func(*testing.T, Options) H) {
	if opt.Template.Kind == "" {
		opt.Template.Kind = sandbox.KindCommand
	}
	if opt.Trust == 0 {
		opt.Trust = sandbox.Trusted
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := opt.Skip[c.name]; ok {
				t.Skipf("not applicable to %s: %s", b.Name(), why)
			}
			c.fn(t, mk(t, opt))
		})
	}
}

type harness struct {
	b   sandbox.Backend
	opt Options
}

// inv returns a command invocation for argv with the suite's defaults.
func (h *harness) inv(argv ...string) *sandbox.Invocation {
	return &sandbox.Invocation{
		ID:       sandbox.NewID(),
		Tenant:   "conformance",
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Image: h.opt.Image, Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}},
		Limits:   sandbox.Limits{Wall: 20 * time.Second},
		Policy:   sandbox.Policy{Trust: h.opt.Trust},
	}
}

// run prepares a fresh sandbox, runs inv, destroys the sandbox.
func (h *harness) run(t *testing.T, inv *sandbox.Invocation) (*sandbox.Result, error) {
	t.Helper()
	ctx := context.Background()
	sb, err := h.b.Prepare(ctx, h.opt.Template)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	return sb.Run(ctx, inv)
}

func (h *harness) mustRun(t *testing.T, inv *sandbox.Invocation) *sandbox.Result {
	t.Helper()
	res, err := h.run(t, inv)
	if err != nil {
		t.Fatalf("run %q: %v", inv.Workload.Argv, err)
	}
	return res
}

func caseEchoExit(t *testing.T, h *harness) {
	res := h.mustRun(t, h.inv("/bin/sh", "-c", "echo hi; echo err >&2; exit 7"))
	if string(res.Stdout) != "hi\n" || string(res.Stderr) != "err\n" || res.ExitCode != 7 || res.Class != sandbox.OK {
		t.Fatalf("got stdout %q stderr %q exit %d class %q, want hi/err/7/ok", res.Stdout, res.Stderr, res.ExitCode, res.Class)
	}
	if res.Backend != h.b.Name() {
		t.Fatalf("result names backend %q, want %q", res.Backend, h.b.Name())
	}
}

func caseEnvExact(t *testing.T, h *harness) {
	t.Setenv("WOVYR_HOST_SECRET", "must-not-leak")
	inv := h.inv("/usr/bin/env")
	inv.Workload.Env = []string{"A=1", "B=two words"}
	res := h.mustRun(t, inv)
	if got := string(res.Stdout); got != "A=1\nB=two words\n" {
		t.Fatalf("env = %q, want exactly A and B", got)
	}
}

func caseStdin(t *testing.T, h *harness) {
	inv := h.inv("/bin/sh", "-c", "tr a-z A-Z")
	inv.Workload.Stdin = []byte("hello stdin")
	res := h.mustRun(t, inv)
	if string(res.Stdout) != "HELLO STDIN" {
		t.Fatalf("stdout %q, want HELLO STDIN", res.Stdout)
	}
}

func caseOutputCap(t *testing.T, h *harness) {
	inv := h.inv("/bin/sh", "-c", "head -c 1000000 /dev/zero; head -c 10 /dev/zero >&2")
	inv.Limits.Output = 4096
	res := h.mustRun(t, inv)
	if len(res.Stdout) != 4096 || !res.StdoutTruncated || len(res.Stderr) != 10 || res.StderrTruncated {
		t.Fatalf("stdout %d truncated %v, stderr %d truncated %v; want 4096 true 10 false",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: the producer must not be blocked or killed by the cap", res.ExitCode)
	}
}

func caseTimeout(t *testing.T, h *harness) {
	inv := h.inv("/bin/sh", "-c", "(sleep 1000 &) ; sleep 1000")
	inv.Limits.Wall = 500 * time.Millisecond
	res := h.mustRun(t, inv)
	if res.Class != sandbox.Timeout {
		t.Fatalf("class %q, want timeout (exit %d, %s)", res.Class, res.ExitCode, res.Error)
	}
	if res.Usage.Wall > 15*time.Second {
		t.Fatalf("a 500ms deadline took %s", res.Usage.Wall)
	}
	// Neither the leader nor the double-forked sleeper survives, seen from
	// the host (for VMs, no host process carries the argument at all).
	if n := battery.HostProcesses("sleep 1000"); n > 0 {
		t.Fatalf("%d host processes still run 'sleep 1000' after the timeout", n)
	}
}

func caseFiles(t *testing.T, h *harness) {
	inv := h.inv("/bin/sh", "-c", "cat in/a.txt; echo out > b.txt; ln -s /etc/passwd leak")
	inv.Workload.Files = []sandbox.File{{Path: "in/a.txt", Data: []byte("file in\n")}}
	inv.Workload.Collect = []string{"b.txt", "leak", "missing"}
	res := h.mustRun(t, inv)
	if string(res.Stdout) != "file in\n" {
		t.Fatalf("stdout %q, want the input file", res.Stdout)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "b.txt" || string(res.Files[0].Data) != "out\n" {
		t.Fatalf("files %+v, want only b.txt=out (a symlink out of the workspace must not be followed)", res.Files)
	}
}

func caseBadInput(t *testing.T, h *harness) {
	for name, mut := range map[string]func(*sandbox.Invocation){
		"empty argv":     func(i *sandbox.Invocation) { i.Workload.Argv = nil },
		"negative limit": func(i *sandbox.Invocation) { i.Limits.Memory = -1 },
		"escaping file":  func(i *sandbox.Invocation) { i.Workload.Files = []sandbox.File{{Path: "../x"}} },
		"bad env":        func(i *sandbox.Invocation) { i.Workload.Env = []string{"NOEQUALS"} },
		"no trust":       func(i *sandbox.Invocation) { i.Policy.Trust = 0 },
	} {
		inv := h.inv("/bin/true")
		mut(inv)
		_, err := h.run(t, inv)
		if !errors.Is(err, sandbox.BadInput) {
			t.Errorf("%s: err %v, want bad-input", name, err)
		}
	}
}

// caseNotStarted: a program that cannot start ends as a shell's command
// would, exit 127 with one line on stderr, on every backend
// (sandbox.NotStarted); it is neither bad input nor a backend failure.
func caseNotStarted(t *testing.T, h *harness) {
	for argv0, want := range map[string]string{
		"/no/such/program": "wovyr: fork/exec /no/such/program: no such file or directory\n",
		"no-such-tool":     "wovyr: no-such-tool: command not found\n",
		"./not-a-program":  "wovyr: fork/exec ./not-a-program: permission denied\n",
	} {
		inv := h.inv(argv0)
		inv.Workload.Files = []sandbox.File{{Path: "not-a-program", Data: []byte("data\n")}}
		res, err := h.run(t, inv)
		if err != nil || res.Class != sandbox.OK || res.ExitCode != sandbox.ExitNotStarted || string(res.Stderr) != want || len(res.Stdout) != 0 || res.Error != "" {
			t.Errorf("%s: result %+v err %v, want class ok, exit 127, stderr %q", argv0, res, err, want)
		}
	}
}

func caseEgress(t *testing.T, h *harness) {
	capa := h.b.Probe(context.Background())
	if capa.Egress {
		t.Skip("backend enforces allowlists; covered by the egress suite")
	}
	inv := h.inv("/bin/true")
	inv.Policy.Network.Allow = []netpolicy.Rule{{CIDR: "127.0.0.1/32", Ports: []uint16{80}}}
	_, err := h.run(t, inv)
	if !errors.Is(err, sandbox.Unenforceable) {
		t.Fatalf("a backend without egress enforcement accepted an allowlist: %v", err)
	}
}

func caseDestroyTwice(t *testing.T, h *harness) {
	ctx := context.Background()
	sb, err := h.b.Prepare(ctx, h.opt.Template)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
}
