package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func TestDefaultIsUsable(t *testing.T) {
	c := Default()
	if c.Listen != "127.0.0.1:8080" || c.MaxBodyBytes != 96<<20 || c.MaxWait.D() != time.Minute ||
		c.Retention.D() != 24*time.Hour || c.ShutdownGrace.D() != 10*time.Second || c.Concurrency <= 0 ||
		c.CgroupReconcile != "owned" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestParseFillsTenantDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"listen":":9000","retention":"1h","tenants":[
		{"name":"acme","weight":3,"token_sha256":["` + HashToken("s3cret") + `"],"max_running":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := c.Tenant("acme")
	if !ok || a.Weight != 3 || a.MaxRunning != 2 || a.MaxPending != 1000 || a.MaxSessions != 8 || a.Rate != 100 || a.Burst != 1000 || c.Retention.D() != time.Hour {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseRejects(t *testing.T) {
	h := HashToken("x")
	for name, tc := range map[string]struct{ json, field string }{
		"unknown key":       {`{"retention":"1h","retnetion":"2h","tenants":[]}`, ""},
		"bad duration":      {`{"retention":"soon","tenants":[]}`, ""},
		"bad tenant name":   {`{"tenants":[{"name":"Acme!","token_sha256":["` + h + `"]}]}`, "tenants[0].name"},
		"duplicate":         {`{"tenants":[{"name":"a","token_sha256":["` + h + `"]},{"name":"a","token_sha256":["` + HashToken("y") + `"]}]}`, "tenants[1].name"},
		"no token":          {`{"tenants":[{"name":"a","token_sha256":[]}]}`, "tenants[0].token_sha256"},
		"plain token":       {`{"tenants":[{"name":"a","token_sha256":["s3cret"]}]}`, "tenants[0].token_sha256"},
		"shared token":      {`{"tenants":[{"name":"a","token_sha256":["` + h + `"]},{"name":"b","token_sha256":["` + h + `"]}]}`, "tenants[1].token_sha256"},
		"negative quota":    {`{"tenants":[{"name":"a","max_pending":-1,"token_sha256":["` + h + `"]}]}`, "tenants[0]"},
		"negative sessions": {`{"tenants":[{"name":"a","max_sessions":-1,"token_sha256":["` + h + `"]}]}`, "tenants[0]"},
		"trailing data":     {`{"tenants":[]} {}`, ""},
		"bad reconcile":     {`{"cgroup_reconcile":"some","tenants":[]}`, "cgroup_reconcile"},
		"mcp language":      {`{"mcp":{"images":{"cobol":"x"}},"tenants":[]}`, "mcp.images"},
		"mcp empty image":   {`{"mcp":{"images":{"python":""}},"tenants":[]}`, "mcp.images"},
		"mcp output":        {`{"mcp":{"max_output":10},"tenants":[]}`, "mcp.max_output"},
		"mcp trust":         {`{"mcp":{"trust":"friendly"},"tenants":[]}`, ""},
	} {
		_, err := Parse(strings.NewReader(tc.json))
		if !errors.Is(err, sandbox.BadInput) || sandbox.FieldOf(err) != tc.field {
			t.Errorf("%s: %v (field %q), want bad-input on %q", name, err, sandbox.FieldOf(err), tc.field)
		}
	}
}

// TestMCPDefaults: model-written code is untrusted unless the operator says
// otherwise; a language left out keeps its default image.
func TestMCPDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"mcp":{"images":{"javascript":"node"}},"tenants":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.MCP.Trust != sandbox.Untrusted || c.MCP.MaxOutput != 64<<10 ||
		c.MCP.Images["javascript"] != "node" || c.MCP.Images["python"] != "python" || c.MCP.Images["bash"] != "python" {
		t.Fatalf("mcp: %+v", c.MCP)
	}
	if d := Default(); d.MCP.Trust != sandbox.Untrusted || len(d.MCP.Images) != 3 {
		t.Fatalf("default mcp: %+v", d.MCP)
	}
}

func TestWithTenantDoesNotAlias(t *testing.T) {
	base := Default()
	c1, err := base.WithTenant(Tenant{Name: "a", TokenSHA256: []string{HashToken("1")}})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := c1.WithTenant(Tenant{Name: "b", TokenSHA256: []string{HashToken("2")}})
	c2.Tenants[0].TokenSHA256[0] = "changed"
	if len(base.Tenants) != 0 || len(c1.Tenants) != 1 || c1.Tenants[0].TokenSHA256[0] == "changed" {
		t.Fatalf("copies share state: base %v c1 %v", base.Tenants, c1.Tenants)
	}
}

func TestParseSnapshots(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"snapshots":{"gvisor":true},"tenants":[]}`))
	if err != nil || !c.Snapshots.GVisor {
		t.Fatalf("snapshots.gvisor: %+v %v", c.Snapshots, err)
	}
	if c, err := Parse(strings.NewReader(`{"tenants":[]}`)); err != nil || c.Snapshots.GVisor {
		t.Fatalf("default: %+v %v", c.Snapshots, err)
	}
	if _, err := Parse(strings.NewReader(`{"snapshots":{"gvisr":true},"tenants":[]}`)); err == nil {
		t.Fatal("an unknown snapshots key was accepted")
	}
}

// TestGPUConfig: the GPU inventory is NVML unless named; fake devices need
// the fake inventory; bad values are typed bad input naming the field.
func TestGPUConfig(t *testing.T) {
	base := func() Config {
		return Config{Tenants: []Tenant{{Name: "a", TokenSHA256: []string{HashToken("x")}}}}
	}
	ok := base()
	ok.GPU = GPU{Inventory: GPUFake, Fake: FakeGPUs{Count: 2, MemoryBytes: 1 << 30, MIG: []string{"1g.10gb"}}}
	ok.Tenants[0].MaxGPUs = 2
	if _, err := ok.WithDefaults(); err != nil {
		t.Fatalf("valid fake GPUs: %v", err)
	}
	for _, c := range []struct {
		gpu   GPU
		gpus  int
		field string
	}{
		{GPU{Inventory: "cuda"}, 0, "gpu.inventory"},
		{GPU{Fake: FakeGPUs{Count: 1}}, 0, "gpu.fake"},
		{GPU{Inventory: GPUNone, Fake: FakeGPUs{Count: 1}}, 0, "gpu.fake"},
		{GPU{Inventory: GPUFake}, 0, "gpu.fake"},
		{GPU{Inventory: GPUFake, Fake: FakeGPUs{Count: -1, MIG: []string{"1g.10gb"}}}, 0, "gpu.fake"},
		{GPU{}, -1, "tenants[0]"},
	} {
		c2 := base()
		c2.GPU, c2.Tenants[0].MaxGPUs = c.gpu, c.gpus
		_, err := c2.WithDefaults()
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Class != sandbox.BadInput || se.Field != c.field {
			t.Errorf("%+v max_gpus %d: %v, want bad input on %s", c.gpu, c.gpus, err, c.field)
		}
	}
}
