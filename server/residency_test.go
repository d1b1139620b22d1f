package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
)

// regionConfig is a node in eu-west of a deployment that also has
// us-east; bob may run only in us-east.
func regionConfig() config.Config {
	cfg := testConfig()
	cfg.Region, cfg.Zone, cfg.Node = "eu-west", "a", "node-1"
	cfg.Residency = config.Residency{Regions: []string{"eu-west", "us-east"},
		DataClasses: map[string][]string{"pii-eu": {"eu-west"}, "pii-us": {"us-east"}}}
	cfg.Tenants[1].Regions = []string{"us-east"}
	return cfg
}

// TestResidencyOnANodeAlone: a node with no cluster runs what may run in
// its region, records where, and refuses the rest with residency-unmet
// (409), naming what was tried — never running it here instead.
func TestResidencyOnANodeAlone(t *testing.T) {
	h := newHarness(t, regionConfig(), "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, bob := h.client(aliceToken), h.client(bobToken)

	inv := command("/bin/true")
	inv.Policy.Residency = sandbox.Residency{DataClass: "pii-eu"}
	rec, err := alice.Submit(ctx, inv, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != client.StateDone || rec.Region != "eu-west" || rec.Zone != "a" || rec.Node != "node-1" {
		t.Fatalf("record %+v", rec)
	}
	for _, c := range []struct {
		c    *client.Client
		res  sandbox.Residency
		want string
	}{
		{alice, sandbox.Residency{Regions: []string{"us-east"}}, "residency-unmet: no live node in the allowed regions [us-east] (live regions: [eu-west]); refused, not placed elsewhere"},
		{alice, sandbox.Residency{DataClass: "pii-us", Regions: []string{"eu-west"}}, "residency-unmet: tenant alice may run in [eu-west us-east]; the invocation asks for [eu-west]; data class pii-us allows [us-east]; no region satisfies them all"},
		{bob, sandbox.Residency{}, "residency-unmet: no live node in the allowed regions [us-east] (live regions: [eu-west]); refused, not placed elsewhere"},
		{bob, sandbox.Residency{Regions: []string{"eu-west"}}, "residency-unmet: tenant bob may run in [us-east]; the invocation asks for [eu-west]; no region satisfies them all"},
	} {
		inv := command("/bin/true")
		inv.Policy.Residency = c.res
		_, err := c.c.Submit(ctx, inv, 0)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != sandbox.ResidencyUnmet || ce.Message != c.want {
			t.Errorf("%+v: got %v, want 409 %s", c.res, err, c.want)
		}
	}
	// Malformed residency is bad input, naming the field.
	resp, body := h.raw("POST", "/v1/invocations", aliceToken, strings.NewReader(
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted","residency":{"regions":[]}}}`), nil)
	errorBody(t, resp, body, 400, sandbox.BadInput, "policy.residency.regions")
	resp, body = h.raw("POST", "/v1/invocations", aliceToken, strings.NewReader(
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted","residency":{"data_class":"pii-mars"}}}`), nil)
	errorBody(t, resp, body, 400, sandbox.BadInput, "policy.residency.data_class")
	// A session is refused as an invocation is: it would live here.
	resp, body = h.raw("POST", "/v1/sessions", bobToken, strings.NewReader(`{"policy":{"trust":"trusted"}}`), nil)
	errorBody(t, resp, body, 409, sandbox.ResidencyUnmet, "")
}

// TestResidencyPolicyIsCheckedAtStartUp: a policy that does not compile,
// or does not return list(string), stops server.New.
func TestResidencyPolicyIsCheckedAtStartUp(t *testing.T) {
	for policy, want := range map[string]string{
		`regions +`:       "bad-input: residency.policy does not compile:",
		`"eu" in regions`: "bad-input (residency.policy): the policy must return list(string), not bool",
	} {
		cfg := regionConfig()
		cfg.Residency.Policy = policy
		_, err := server.New(server.Options{Config: cfg, Manager: nil, Store: nil})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: got %v, want %s…", policy, err, want)
		}
	}
}
