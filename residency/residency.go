// Package residency decides where a tenant's invocation may run: the set of
// regions allowed by the operator's policy for this tenant and these data,
// intersected with what the invocation itself asks for.
//
// The policy is a CEL expression (cel.dev/cel-go) written by the operator
// in the daemon config and compiled once, at start-up, by New. It sees the
// tenant (its name, the regions and attributes the config gives it) and the
// invocation's request (regions, data class, data labels), and returns
// list(string): the regions the tenant may use for it. A policy that does
// not compile, or whose type is not list(string), is refused by New, so a
// daemon never starts with a policy it cannot evaluate.
//
// # Why CEL
//
// Residency rules are the operator's, differ per deployment ("PII of EU
// tenants stays in the EU, unless labelled public"), and must be
// side-effect free, bounded and checkable before the first request. CEL is
// exactly that: typed at compile time, no loops or I/O, linear-time
// evaluation, and the same language Kubernetes uses for admission rules.
//
// What it refuses to do: widen. The allowed set is always an intersection;
// an empty one is an *UnmetError (class residency-unmet), never "anywhere"
// or "the node's own region". A policy whose evaluation fails at run time
// (a missing attribute) also refuses: fail closed.
package residency

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/wovyr/wovyr/sandbox"
)

// Unmet is the class of a refusal: no region satisfies every constraint.
// The API maps it to 409, as floor-unmet: the request is well formed, but
// this deployment cannot place it where it is allowed to run.
const Unmet = sandbox.ResidencyUnmet

// DefaultPolicy is the policy when the config names none: the tenant's
// configured regions, or every region of the deployment when the tenant
// has none.
const DefaultPolicy = `size(tenant_regions) > 0 ? tenant_regions : regions`

// Options configure a Policy. Fields are copied by New.
type Options struct {
	// Regions are the deployment's regions, the universe every set is cut
	// from. Empty means no region is known, and every residency request
	// is unmet.
	Regions []string
	// Policy is the CEL expression. Empty means DefaultPolicy. Variables:
	//
	//	tenant          string               the tenant's name
	//	tenant_regions  list(string)         its regions in the config
	//	attrs           map(string, string)  its attributes in the config
	//	regions         list(string)         Options.Regions
	//	requested       list(string)         policy.residency.regions
	//	data_class      string               policy.residency.data_class
	//	labels          map(string, string)  policy.residency.labels
	Policy string
	// DataClasses maps a named data class to the regions its data may be
	// processed in. A request naming a class not listed is bad input.
	DataClasses map[string][]string
}

// Tenant is what the config says of a tenant.
type Tenant struct {
	Name       string
	Regions    []string
	Attributes map[string]string
}

// Policy is a compiled residency policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	prog    cel.Program
	source  string
	regions []string
	classes map[string][]string
}

// New validates o and compiles its policy. Every error is a BadInput
// *sandbox.Error naming the config field at fault.
func New(o Options) (*Policy, error) {
	p := &Policy{source: o.Policy, regions: sortedSet(o.Regions), classes: map[string][]string{}}
	if p.source == "" {
		p.source = DefaultPolicy
	}
	for i, r := range o.Regions {
		if !ValidRegion(r) {
			return nil, sandbox.Errorf(sandbox.BadInput, fmt.Sprintf("residency.regions[%d]", i), "region %q must match %s", r, regionRE)
		}
	}
	for name, rs := range o.DataClasses {
		if !ValidRegion(name) {
			return nil, sandbox.Errorf(sandbox.BadInput, "residency.data_classes", "data class %q must match %s", name, regionRE)
		}
		for _, r := range rs {
			if !slices.Contains(p.regions, r) {
				return nil, sandbox.Errorf(sandbox.BadInput, "residency.data_classes."+name, "region %q is not one of the deployment's regions %v", r, p.regions)
			}
		}
		p.classes[name] = sortedSet(rs)
	}
	env, err := cel.NewEnv(
		cel.Variable("tenant", cel.StringType),
		cel.Variable("tenant_regions", cel.ListType(cel.StringType)),
		cel.Variable("attrs", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("regions", cel.ListType(cel.StringType)),
		cel.Variable("requested", cel.ListType(cel.StringType)),
		cel.Variable("data_class", cel.StringType),
		cel.Variable("labels", cel.MapType(cel.StringType, cel.StringType)),
	)
	if err != nil {
		return nil, fmt.Errorf("residency: CEL environment: %w", err)
	}
	ast, iss := env.Compile(p.source)
	if iss.Err() != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, iss.Err(), "residency.policy does not compile")
	}
	if t := ast.OutputType(); !t.IsExactType(cel.ListType(cel.StringType)) {
		return nil, sandbox.Errorf(sandbox.BadInput, "residency.policy", "the policy must return list(string), not %s", t)
	}
	// A bound on evaluation cost: a policy is a few comparisons, and one
	// that is not must not stall every submission.
	if p.prog, err = env.Program(ast, cel.CostLimit(100_000)); err != nil {
		return nil, sandbox.Wrap(sandbox.BadInput, err, "residency.policy")
	}
	return p, nil
}

// Regions returns the deployment's regions, sorted.
func (p *Policy) Regions() []string { return slices.Clone(p.regions) }

// Allowed returns the regions inv may run in for t, sorted: the policy's
// answer ∩ the invocation's regions (if it names any) ∩ its data class's
// regions (if it names one) ∩ the deployment's regions. An empty set is an
// *UnmetError; a request naming an unknown data class is BadInput.
func (p *Policy) Allowed(t Tenant, req sandbox.Residency) ([]string, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var class []string
	if req.DataClass != "" {
		var ok bool
		if class, ok = p.classes[req.DataClass]; !ok {
			return nil, sandbox.Errorf(sandbox.BadInput, "policy.residency.data_class", "no data class %q (known: %v)", req.DataClass, p.classNames())
		}
	}
	out, _, err := p.prog.Eval(map[string]any{
		"tenant":         t.Name,
		"tenant_regions": orEmpty(t.Regions),
		"attrs":          orEmptyMap(t.Attributes),
		"regions":        p.regions,
		"requested":      orEmpty(req.Regions),
		"data_class":     req.DataClass,
		"labels":         orEmptyMap(req.Labels),
	})
	e := &UnmetError{Tenant: t.Name, Requested: sortedSet(req.Regions), DataClass: req.DataClass, ClassRegions: class}
	if err != nil {
		e.EvalErr = err.Error()
		return nil, e
	}
	v, err := out.ConvertToNative(stringSlice)
	if err != nil {
		e.EvalErr = err.Error()
		return nil, e
	}
	e.TenantAllowed = sortedSet(v.([]string))
	set := intersect(e.TenantAllowed, p.regions)
	if req.Regions != nil {
		set = intersect(set, e.Requested)
	}
	if req.DataClass != "" {
		set = intersect(set, class)
	}
	if len(set) == 0 {
		return nil, e
	}
	return set, nil
}

func (p *Policy) classNames() []string {
	var ns []string
	for n := range p.classes {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// UnmetError is a refusal: it names what was tried, so that the caller
// (and the operator reading the log) sees which constraint emptied the
// set. Region names and class names are the deployment's vocabulary, not
// host detail, so the whole message is safe for the tenant.
type UnmetError struct {
	Tenant        string
	TenantAllowed []string // what the policy allows the tenant for this invocation
	Requested     []string // the invocation's regions (nil: none named)
	DataClass     string
	ClassRegions  []string // the data class's regions
	Placing       bool     // set by Place: the allowed set was not empty, but no live node is in it
	Allowed       []string // with Placing: the allowed set
	Live          []string // with Placing: the regions that have a live node
	EvalErr       string   // the policy failed to evaluate (fail closed)
}

func (e *UnmetError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", Unmet)
	switch {
	case e.EvalErr != "":
		fmt.Fprintf(&b, "the residency policy could not be evaluated for tenant %s (%s); refused", e.Tenant, e.EvalErr)
		return b.String()
	case e.Placing:
		fmt.Fprintf(&b, "no live node in the allowed regions %v (live regions: %v); refused, not placed elsewhere", e.Allowed, e.Live)
		return b.String()
	}
	fmt.Fprintf(&b, "tenant %s may run in %v", e.Tenant, e.TenantAllowed)
	if e.Requested != nil {
		fmt.Fprintf(&b, "; the invocation asks for %v", e.Requested)
	}
	if e.DataClass != "" {
		fmt.Fprintf(&b, "; data class %s allows %v", e.DataClass, e.ClassRegions)
	}
	b.WriteString("; no region satisfies them all")
	return b.String()
}

// Public is the tenant's rendering: the same, since it holds no host detail.
func (e *UnmetError) Public() string { return e.Error() }

// Unwrap makes errors.Is(err, Unmet) true.
func (e *UnmetError) Unwrap() error { return Unmet }

// Place picks the region to run in from allowed (sorted) given the regions
// that have a live node now: the first allowed region that is live, after
// prefer if prefer is allowed and live (the API node's own region, so that
// work stays local when it may). None live is an *UnmetError with Placing
// set: fail closed, never another region.
func Place(allowed, live []string, prefer string) (string, error) {
	ok := intersect(allowed, sortedSet(live))
	if len(ok) == 0 {
		return "", &UnmetError{Placing: true, Allowed: slices.Clone(allowed), Live: sortedSet(live)}
	}
	if slices.Contains(ok, prefer) {
		return prefer, nil
	}
	return ok[0], nil
}

// ValidRegion reports whether name is a usable region (or zone, or data
// class) name (sandbox.ValidRegion).
func ValidRegion(name string) bool { return sandbox.ValidRegion(name) }

const regionRE = sandbox.RegionRE

var stringSlice = reflect.TypeOf([]string(nil))

func sortedSet(s []string) []string {
	if s == nil {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// intersect returns the sorted elements of sorted sets a and b in both.
func intersect(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); ok {
			out = append(out, x)
		}
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmptyMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
