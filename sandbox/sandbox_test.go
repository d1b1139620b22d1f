package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/netpolicy"
	"github.com/wovyr/wovyr/resource"
)

func valid() *Invocation {
	return &Invocation{
		Tenant:   "acme",
		Workload: Workload{Kind: KindCommand, Argv: []string{"/bin/true"}},
		Policy:   Policy{Trust: Trusted},
	}
}

func TestValidateRejectsBadInputWithField(t *testing.T) {
	cases := []struct {
		field string
		mut   func(*Invocation)
	}{
		{"tenant", func(i *Invocation) { i.Tenant = "" }},
		{"tenant", func(i *Invocation) { i.Tenant = "../etc" }},
		{"tenant", func(i *Invocation) { i.Tenant = "Acme" }},
		{"id", func(i *Invocation) { i.ID = "a/b" }},
		{"workload.kind", func(i *Invocation) { i.Workload.Kind = "" }},
		{"workload.kind", func(i *Invocation) { i.Workload.Kind = "elf" }},
		{"workload.argv", func(i *Invocation) { i.Workload.Argv = nil }},
		{"workload.argv", func(i *Invocation) { i.Workload.Argv = []string{""} }},
		{"workload.argv", func(i *Invocation) { i.Workload.Argv = []string{"a\x00b"} }},
		{"workload.module", func(i *Invocation) { i.Workload.Module = []byte{0} }},
		{"workload.module", func(i *Invocation) { i.Workload.Kind = KindWasm }},
		{"workload.env", func(i *Invocation) { i.Workload.Env = []string{"=x"} }},
		{"workload.env", func(i *Invocation) { i.Workload.Env = []string{"NOVALUE"} }},
		{"workload.stdin", func(i *Invocation) { i.Workload.Stdin = make([]byte, MaxStdinBytes+1) }},
		{"workload.files", func(i *Invocation) { i.Workload.Files = []File{{Path: "/etc/passwd"}} }},
		{"workload.files", func(i *Invocation) { i.Workload.Files = []File{{Path: "a/../../x"}} }},
		{"workload.files", func(i *Invocation) { i.Workload.Files = []File{{Path: "a", Mode: 0o4755}} }},
		{"workload.collect", func(i *Invocation) { i.Workload.Collect = []string{".."} }},
		{"limits.wall", func(i *Invocation) { i.Limits.Wall = -time.Second }},
		{"limits.memory", func(i *Invocation) { i.Limits.Memory = -1 }},
		{"limits.memory", func(i *Invocation) { i.Limits.Memory = 1000 }},
		{"limits.pids", func(i *Invocation) { i.Limits.Pids = -1 }},
		{"limits.output", func(i *Invocation) { i.Limits.Output = MaxOutputBytes + 1 }},
		{"policy.trust", func(i *Invocation) { i.Policy.Trust = 0 }},
		{"policy.floor", func(i *Invocation) { i.Policy.Floor = 9 }},
		{"resources", func(i *Invocation) { i.Resources.Vector = resource.Vector{CPUMillis: -1} }},
		{"idempotent", func(i *Invocation) {
			i.Idempotent, i.Workload.Files = true, []File{{Path: "a", Data: make([]byte, MaxIdempotentBytes/2+1)}, {Path: "b", Data: make([]byte, MaxIdempotentBytes/2)}}
		}},
		{"policy.network.allow[0].cidr", func(i *Invocation) {
			i.Policy.Network.Allow = []netpolicy.Rule{{CIDR: "10.0.0.1/8", Ports: []uint16{443}}}
		}},
		{"policy.network.allow[0].ports", func(i *Invocation) {
			i.Policy.Network.Allow = []netpolicy.Rule{{Host: "api.example.com", Ports: []uint16{0}}}
		}},
	}
	for _, c := range cases {
		inv := valid()
		c.mut(inv)
		err := inv.Validate()
		if !errors.Is(err, BadInput) || FieldOf(err) != c.field {
			t.Errorf("want bad-input on %s, got %v (field %q)", c.field, err, FieldOf(err))
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid invocation rejected: %v", err)
	}
}

func TestParseNames(t *testing.T) {
	for _, s := range Strengths {
		if got, err := ParseStrength(s.String()); err != nil || got != s {
			t.Errorf("round trip %s: %v %v", s, got, err)
		}
	}
	if _, err := ParseStrength("vm"); !errors.Is(err, BadInput) {
		t.Errorf("unknown strength: %v", err)
	}
	for _, c := range TrustClasses {
		if got, err := ParseTrustClass(c.String()); err != nil || got != c {
			t.Errorf("round trip %s: %v %v", c, got, err)
		}
	}
	if _, err := ParseTrustClass("root"); !errors.Is(err, BadInput) || !strings.Contains(err.Error(), `"root"`) {
		t.Errorf("unknown trust: %v", err)
	}
}

func TestRequiredIsTheMaximum(t *testing.T) {
	var f Floors
	if r := f.Required(Policy{Trust: Trusted}); r != Native {
		t.Fatalf("trusted alone: %s", r)
	}
	if r := f.Required(Policy{Trust: Trusted, Preference: Container}); r != Container {
		t.Fatalf("preference raises: %s", r)
	}
	if r := f.Required(Policy{Trust: Hostile, Preference: Native, Floor: Wasm}); r != MicroVM {
		t.Fatalf("trust floor wins over weaker preference and floor: %s", r)
	}
	if r := f.Required(Policy{Trust: 0}); r != MicroVM {
		t.Fatalf("an unknown class must fail closed, got %s", r)
	}
}

func TestCappedKeepsPrefixAndDrains(t *testing.T) {
	c := &Capped{Limit: 5}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	if string(c.Bytes()) != "abcde" || !c.Truncated {
		t.Fatalf("kept %q truncated %v", c.Bytes(), c.Truncated)
	}
	if b := (&Capped{Limit: 5}).Bytes(); b == nil || len(b) != 0 {
		t.Fatalf("empty Bytes must be non-nil and empty")
	}
}

func TestErrorClasses(t *testing.T) {
	err := Wrap(Timeout, errors.New("deadline"), "run %d", 1)
	if !errors.Is(err, Timeout) || errors.Is(err, OOM) || ClassOf(err) != Timeout {
		t.Fatalf("class matching broken: %v", err)
	}
	if ClassOf(errors.New("plain")) != BackendFailure || ClassOf(nil) != OK {
		t.Fatal("untyped errors must count as backend failures, nil as OK")
	}
	fe := &FloorError{Required: GVisor, Kind: KindCommand}
	if !errors.Is(fe, FloorUnmet) || ClassOf(fe) != FloorUnmet {
		t.Fatalf("floor error class: %v", ClassOf(fe))
	}
}

type publicCause struct{}

func (publicCause) Error() string  { return "verdict\nwith a dump" }
func (publicCause) Public() string { return "verdict" }

// Issue #26 item 2: what a tenant reads names no host detail.
func TestPublicLeavesOutHostDetail(t *testing.T) {
	host := &fs.PathError{Op: "open", Path: "/var/lib/wovyr/images/x", Err: fs.ErrNotExist}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{Wrap(BadInput, host, "file a"), "bad-input: file a"},
		{Wrap(BadInput, &fs.PathError{Op: "openat", Path: "a/b", Err: fs.ErrExist}, "file a/b"), "bad-input: file a/b: openat a/b: file already exists"},
		{Wrap(BadInput, publicCause{}, "invalid wasm module"), "bad-input: invalid wasm module: verdict"},
		{fmt.Errorf("prepare on x: %w", &Error{Class: BadInput, Field: "template.image", Msg: `no template "t" on this node`, Err: errors.New("build it: wovyr image build t")}),
			`bad-input (template.image): no template "t" on this node`},
		{fmt.Errorf("prepare on x: %w", Wrap(BackendFailure, host, "bundle in %s", "/var/lib/wovyr/run")),
			"backend-failure: the sandbox machinery failed on this node (not the workload); the operator's log has the detail"},
		{errors.New("untyped " + host.Error()), "backend-failure: the sandbox machinery failed on this node (not the workload); the operator's log has the detail"},
		{&FloorError{Required: GVisor, Kind: KindCommand, Rejections: []Rejection{
			{Backend: "gvisor", Reason: "unavailable: runsc: exec: \"runsc\": executable file not found in $PATH", Summary: SummaryUnavailable},
			{Backend: "microvm", Reason: "open /var/lib/wovyr/images/microvm/image.json"}}},
			"floor-unmet: no usable backend at or above gvisor for a command workload; gvisor: not available on this node; microvm: not usable on this node"},
		{Errorf(Timeout, "", "wall deadline %s passed", "1s"), "timeout: wall deadline 1s passed"},
	} {
		if got := Public(c.err); got != c.want {
			t.Errorf("Public(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestValidTenantIsTheRegexp: the hand-written check accepts exactly what
// tenantRE describes, over every short string of the interesting bytes
// and the length bounds.
func TestValidTenantIsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(tenantRE)
	alphabet := []byte("az09_-A.é/ ")
	var walk func(prefix []byte)
	walk = func(prefix []byte) {
		if got, want := ValidTenant(string(prefix)), re.MatchString(string(prefix)); got != want {
			t.Fatalf("ValidTenant(%q) = %v, the regexp says %v", prefix, got, want)
		}
		if len(prefix) == 3 {
			return
		}
		for _, c := range alphabet {
			walk(append(prefix, c))
		}
	}
	walk(nil)
	for _, n := range []int{62, 63, 64, 100} {
		s := strings.Repeat("a", n)
		if ValidTenant(s) != re.MatchString(s) {
			t.Fatalf("length %d: ValidTenant %v", n, ValidTenant(s))
		}
	}
}

// Regression for the fuzzing pass of issue #24 (FuzzResultDisk): a
// sandbox's "could not start" reason went onto stderr past the output cap.
func TestAppendNotStartedKeepsTheCap(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		limit  int64
		want   string
		cut    bool
	}{
		{"", 100, "wovyr: nope\n", false},
		{"ab", 14, "abwovyr: nope\n", false},
		{"ab", 9, "abwovyr: ", true},
		{"", 0, "", true},
	} {
		out, cut := AppendNotStarted([]byte(tc.stderr), "nope", tc.limit)
		if string(out) != tc.want || cut != tc.cut {
			t.Errorf("AppendNotStarted(%q, 'nope', %d) = %q, %t; want %q, %t", tc.stderr, tc.limit, out, cut, tc.want, tc.cut)
		}
	}
}

// TestCheckReplyOutputHoldsTheSandboxToTheCap: a reply with more output
// than the job's cap (an agent the tenant's code tampered with, a hostile
// guest) is a backend failure, whatever the stream.
func TestCheckReplyOutputHoldsTheSandboxToTheCap(t *testing.T) {
	for _, tc := range []struct {
		out, errs int
		ok        bool
	}{{64, 64, true}, {0, 0, true}, {65, 0, false}, {0, 65, false}} {
		err := CheckReplyOutput("the agent", make([]byte, tc.out), make([]byte, tc.errs), 64)
		if (err == nil) != tc.ok || (err != nil && ClassOf(err) != BackendFailure) {
			t.Errorf("%d/%d bytes under a 64-byte cap: %v", tc.out, tc.errs, err)
		}
	}
}

// TestClaimRefusesGPUs: a session asking for GPUs is bad input, before
// anything is selected (devices are assigned per invocation, ADR 0026).
func TestClaimRefusesGPUs(t *testing.T) {
	c := &Claim{ID: "s1", Tenant: "acme", Policy: Policy{Trust: Trusted}}
	if err := c.Validate(); err != nil {
		t.Fatalf("a claim without GPUs: %v", err)
	}
	c.Resources.GPU = 1
	if err := c.Validate(); ClassOf(err) != BadInput || !strings.Contains(err.Error(), "resources.gpu") {
		t.Fatalf("a claim with a GPU: %v, want bad input naming resources.gpu", err)
	}
}
