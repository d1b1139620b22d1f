package residency_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/residency"
	"github.com/wovyr/wovyr/sandbox"
)

var deployment = residency.Options{
	Regions:     []string{"us-east", "eu-west", "eu-central"},
	DataClasses: map[string][]string{"pii-eu": {"eu-west", "eu-central"}, "pii-de": {"eu-central"}},
}

var (
	euTenant  = residency.Tenant{Name: "acme-eu", Regions: []string{"eu-west", "eu-central"}}
	usTenant  = residency.Tenant{Name: "acme-us", Regions: []string{"us-east"}}
	anyTenant = residency.Tenant{Name: "global"}
)

func mustNew(t *testing.T, o residency.Options) *residency.Policy {
	t.Helper()
	p, err := residency.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDefaultPolicyTruthTable is every tenant × request of the default
// policy: the allowed set, or the exact refusal.
func TestDefaultPolicyTruthTable(t *testing.T) {
	p := mustNew(t, deployment)
	reqs := map[string]sandbox.Residency{
		"none":       {},
		"eu-west":    {Regions: []string{"eu-west"}},
		"us-east":    {Regions: []string{"us-east"}},
		"both":       {Regions: []string{"us-east", "eu-west"}},
		"pii-eu":     {DataClass: "pii-eu"},
		"pii-eu+us":  {DataClass: "pii-eu", Regions: []string{"us-east"}},
		"pii-de+eu":  {DataClass: "pii-de", Regions: []string{"eu-west", "eu-central"}},
		"mars":       {Regions: []string{"mars"}},
		"labels":     {Labels: map[string]string{"sensitivity": "high"}},
		"pii-de+euw": {DataClass: "pii-de", Regions: []string{"eu-west"}},
	}
	const eu, us, all = "eu-central,eu-west", "us-east", "eu-central,eu-west,us-east"
	table := []struct {
		tenant residency.Tenant
		req    string
		want   string // the allowed set, or the refusal
	}{
		{euTenant, "none", eu},
		{euTenant, "eu-west", "eu-west"},
		{euTenant, "us-east", "residency-unmet: tenant acme-eu may run in [eu-central eu-west]; the invocation asks for [us-east]; no region satisfies them all"},
		{euTenant, "both", "eu-west"},
		{euTenant, "pii-eu", eu},
		{euTenant, "pii-eu+us", "residency-unmet: tenant acme-eu may run in [eu-central eu-west]; the invocation asks for [us-east]; data class pii-eu allows [eu-central eu-west]; no region satisfies them all"},
		{euTenant, "pii-de+eu", "eu-central"},
		{euTenant, "mars", "residency-unmet: tenant acme-eu may run in [eu-central eu-west]; the invocation asks for [mars]; no region satisfies them all"},
		{euTenant, "labels", eu},
		{euTenant, "pii-de+euw", "residency-unmet: tenant acme-eu may run in [eu-central eu-west]; the invocation asks for [eu-west]; data class pii-de allows [eu-central]; no region satisfies them all"},
		{usTenant, "none", us},
		{usTenant, "eu-west", "residency-unmet: tenant acme-us may run in [us-east]; the invocation asks for [eu-west]; no region satisfies them all"},
		{usTenant, "us-east", us},
		{usTenant, "both", us},
		{usTenant, "pii-eu", "residency-unmet: tenant acme-us may run in [us-east]; data class pii-eu allows [eu-central eu-west]; no region satisfies them all"},
		{usTenant, "pii-eu+us", "residency-unmet: tenant acme-us may run in [us-east]; the invocation asks for [us-east]; data class pii-eu allows [eu-central eu-west]; no region satisfies them all"},
		{usTenant, "pii-de+eu", "residency-unmet: tenant acme-us may run in [us-east]; the invocation asks for [eu-central eu-west]; data class pii-de allows [eu-central]; no region satisfies them all"},
		{usTenant, "mars", "residency-unmet: tenant acme-us may run in [us-east]; the invocation asks for [mars]; no region satisfies them all"},
		{usTenant, "labels", us},
		{usTenant, "pii-de+euw", "residency-unmet: tenant acme-us may run in [us-east]; the invocation asks for [eu-west]; data class pii-de allows [eu-central]; no region satisfies them all"},
		{anyTenant, "none", all},
		{anyTenant, "eu-west", "eu-west"},
		{anyTenant, "us-east", us},
		{anyTenant, "both", "eu-west,us-east"},
		{anyTenant, "pii-eu", eu},
		{anyTenant, "pii-eu+us", "residency-unmet: tenant global may run in [eu-central eu-west us-east]; the invocation asks for [us-east]; data class pii-eu allows [eu-central eu-west]; no region satisfies them all"},
		{anyTenant, "pii-de+eu", "eu-central"},
		{anyTenant, "mars", "residency-unmet: tenant global may run in [eu-central eu-west us-east]; the invocation asks for [mars]; no region satisfies them all"},
		{anyTenant, "labels", all},
		{anyTenant, "pii-de+euw", "residency-unmet: tenant global may run in [eu-central eu-west us-east]; the invocation asks for [eu-west]; data class pii-de allows [eu-central]; no region satisfies them all"},
	}
	if len(table) != 3*len(reqs) {
		t.Fatalf("the table has %d rows, want every tenant × request (%d)", len(table), 3*len(reqs))
	}
	for _, c := range table {
		got := outcome(p.Allowed(c.tenant, reqs[c.req]))
		if got != c.want {
			t.Errorf("%s × %s:\n got %s\nwant %s", c.tenant.Name, c.req, got, c.want)
		}
	}
}

func outcome(set []string, err error) string {
	if err != nil {
		var ue *residency.UnmetError
		if !errors.As(err, &ue) || !errors.Is(err, sandbox.ResidencyUnmet) || sandbox.ClassOf(err) != sandbox.ResidencyUnmet || sandbox.Public(err) != err.Error() {
			return "not a residency-unmet: " + err.Error()
		}
		return err.Error()
	}
	return strings.Join(set, ",")
}

// TestCustomPolicy reads tenant attributes and data labels: EU tenants'
// sensitive data stays in eu-central; a missing attribute fails closed.
func TestCustomPolicy(t *testing.T) {
	o := deployment
	o.Policy = `attrs["jurisdiction"] == "eu"
		? ("sensitivity" in labels && labels["sensitivity"] == "high" ? ["eu-central"] : ["eu-west", "eu-central"])
		: regions.filter(r, !r.startsWith("eu-"))`
	p := mustNew(t, o)
	eu := residency.Tenant{Name: "bank", Attributes: map[string]string{"jurisdiction": "eu"}}
	us := residency.Tenant{Name: "shop", Attributes: map[string]string{"jurisdiction": "us"}}
	high := map[string]string{"sensitivity": "high"}
	for _, c := range []struct {
		tenant residency.Tenant
		req    sandbox.Residency
		want   string
	}{
		{eu, sandbox.Residency{}, "eu-central,eu-west"},
		{eu, sandbox.Residency{Labels: high}, "eu-central"},
		{eu, sandbox.Residency{Labels: high, Regions: []string{"eu-west"}}, "residency-unmet: tenant bank may run in [eu-central]; the invocation asks for [eu-west]; no region satisfies them all"},
		{us, sandbox.Residency{}, "us-east"},
		{us, sandbox.Residency{Labels: high}, "us-east"},
		{us, sandbox.Residency{DataClass: "pii-eu"}, "residency-unmet: tenant shop may run in [us-east]; data class pii-eu allows [eu-central eu-west]; no region satisfies them all"},
		{residency.Tenant{Name: "anon"}, sandbox.Residency{}, "residency-unmet: the residency policy could not be evaluated for tenant anon (no such key: jurisdiction); refused"},
	} {
		if got := outcome(p.Allowed(c.tenant, c.req)); got != c.want {
			t.Errorf("%s %+v:\n got %s\nwant %s", c.tenant.Name, c.req, got, c.want)
		}
	}
}

// TestPolicyOutsideTheDeploymentNarrows: a policy naming a region the
// deployment does not have cannot place work there.
func TestPolicyOutsideTheDeploymentNarrows(t *testing.T) {
	o := deployment
	o.Policy = `["mars", "eu-west"]`
	p := mustNew(t, o)
	if got := outcome(p.Allowed(anyTenant, sandbox.Residency{})); got != "eu-west" {
		t.Fatalf("got %s", got)
	}
	o.Policy = `["mars"]`
	p = mustNew(t, o)
	if got, want := outcome(p.Allowed(anyTenant, sandbox.Residency{})), "residency-unmet: tenant global may run in [mars]; no region satisfies them all"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestConfigErrors: a policy that does not compile or does not return
// list(string), or a malformed deployment, is refused by New.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		o    residency.Options
		want string
	}{
		{"syntax", residency.Options{Policy: `regions +`}, "bad-input: residency.policy does not compile: ERROR: <input>:1:10: Syntax error: mismatched input '<EOF>' expecting"},
		{"undeclared", residency.Options{Policy: `tenant_zones`}, "bad-input: residency.policy does not compile: ERROR: <input>:1:1: undeclared reference to 'tenant_zones'"},
		{"string", residency.Options{Policy: `tenant`}, "bad-input (residency.policy): the policy must return list(string), not string"},
		{"ints", residency.Options{Policy: `[1, 2]`}, "bad-input (residency.policy): the policy must return list(string), not list(int)"},
		{"map", residency.Options{Policy: `labels`}, "bad-input (residency.policy): the policy must return list(string), not map(string, string)"},
		{"bool", residency.Options{Policy: `"eu" in regions`}, "bad-input (residency.policy): the policy must return list(string), not bool"},
		{"region", residency.Options{Regions: []string{"EU West"}}, `bad-input (residency.regions[0]): region "EU West" must match ^[a-z0-9][a-z0-9_-]{0,62}$`},
		{"class", residency.Options{Regions: []string{"eu"}, DataClasses: map[string][]string{"pii": {"us"}}}, `bad-input (residency.data_classes.pii): region "us" is not one of the deployment's regions [eu]`},
	} {
		_, err := residency.New(c.o)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || sandbox.ClassOf(err) != sandbox.BadInput {
			t.Errorf("%s: got %v\nwant %s…", c.name, err, c.want)
		}
	}
}

// TestMalformedRequests are bad input, never an empty set.
func TestMalformedRequests(t *testing.T) {
	p := mustNew(t, deployment)
	for _, c := range []struct {
		req  sandbox.Residency
		want string
	}{
		{sandbox.Residency{Regions: []string{}}, "bad-input (policy.residency.regions): an empty list allows nothing; omit it to ask for no region"},
		{sandbox.Residency{Regions: []string{"eu-west", "eu-west"}}, `bad-input (policy.residency.regions[1]): region "eu-west" listed twice`},
		{sandbox.Residency{Regions: []string{"../x"}}, `bad-input (policy.residency.regions[0]): region "../x" must match ^[a-z0-9][a-z0-9_-]{0,62}$`},
		{sandbox.Residency{DataClass: "pii-us"}, `bad-input (policy.residency.data_class): no data class "pii-us" (known: [pii-de pii-eu])`},
		{sandbox.Residency{Labels: map[string]string{"": "x"}}, "bad-input (policy.residency.labels): a label needs a name, and name and value at most 1024 bytes together"},
	} {
		_, err := p.Allowed(anyTenant, c.req)
		if err == nil || err.Error() != c.want || sandbox.ClassOf(err) != sandbox.BadInput {
			t.Errorf("%+v: got %v, want %s", c.req, err, c.want)
		}
	}
}

// TestPlace: the preferred region when allowed and live, else the first
// allowed live one, else refused — never a region outside allowed.
func TestPlace(t *testing.T) {
	for _, c := range []struct {
		allowed, live []string
		prefer, want  string
	}{
		{[]string{"eu-central", "eu-west"}, []string{"eu-west", "us-east"}, "us-east", "eu-west"},
		{[]string{"eu-central", "eu-west"}, []string{"eu-west", "eu-central"}, "eu-west", "eu-west"},
		{[]string{"eu-central", "eu-west"}, []string{"eu-west", "eu-central"}, "", "eu-central"},
		{[]string{"eu-west"}, []string{"us-east"}, "us-east", "residency-unmet: no live node in the allowed regions [eu-west] (live regions: [us-east]); refused, not placed elsewhere"},
		{[]string{"eu-west"}, nil, "eu-west", "residency-unmet: no live node in the allowed regions [eu-west] (live regions: []); refused, not placed elsewhere"},
	} {
		r, err := residency.Place(c.allowed, c.live, c.prefer)
		got := r
		if err != nil {
			got = outcome(nil, err)
		}
		if got != c.want {
			t.Errorf("Place(%v, %v, %q) = %s, want %s", c.allowed, c.live, c.prefer, got, c.want)
		}
	}
}

// TestRandomAgainstOracle compares Allowed with plain set arithmetic over
// random tenants and requests under the default policy.
func TestRandomAgainstOracle(t *testing.T) {
	p := mustNew(t, deployment)
	all := []string{"eu-central", "eu-west", "us-east"}
	rng := rand.New(rand.NewPCG(1, 2))
	subset := func() []string {
		var s []string
		for _, r := range all {
			if rng.IntN(2) == 0 {
				s = append(s, r)
			}
		}
		return s
	}
	for i := range 5000 {
		tn := residency.Tenant{Name: "t", Regions: subset()}
		var req sandbox.Residency
		if rng.IntN(2) == 0 {
			req.Regions = subset()
			if len(req.Regions) == 0 {
				req.Regions = nil
			}
		}
		if rng.IntN(3) == 0 {
			req.DataClass = []string{"pii-eu", "pii-de"}[rng.IntN(2)]
		}
		want := slices.Clone(all)
		if len(tn.Regions) > 0 {
			want = keep(want, tn.Regions)
		}
		if req.Regions != nil {
			want = keep(want, req.Regions)
		}
		if req.DataClass != "" {
			want = keep(want, deployment.DataClasses[req.DataClass])
		}
		got, err := p.Allowed(tn, req)
		if len(want) == 0 {
			if !errors.Is(err, residency.Unmet) {
				t.Fatalf("case %d: %+v %+v: got %v, %v, want residency-unmet", i, tn, req, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("case %d: %+v %+v: got %v, %v, want %v", i, tn, req, got, err, want)
		}
	}
}

func keep(s, in []string) []string {
	return slices.DeleteFunc(s, func(x string) bool { return !slices.Contains(in, x) })
}

func BenchmarkAllowed(b *testing.B) {
	p, err := residency.New(deployment)
	if err != nil {
		b.Fatal(err)
	}
	req := sandbox.Residency{DataClass: "pii-eu"}
	for b.Loop() {
		if _, err := p.Allowed(euTenant, req); err != nil {
			b.Fatal(err)
		}
	}
}
