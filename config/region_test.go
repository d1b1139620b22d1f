package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

func TestRegionDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"region":"eu-west","zone":"a","tenants":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Residency.Regions, []string{"eu-west"}) || c.NATS.Listen != "127.0.0.1:0" || c.NATS.ClusterName != "wovyr" || c.NATS.Heartbeat.D().String() != "1s" {
		t.Fatalf("defaults %+v %+v", c.Residency, c.NATS)
	}
	if d := Default(); d.Region != "" || d.Residency.Regions != nil {
		t.Fatalf("no region by default: %+v", d.Residency)
	}
}

func TestRegionRejects(t *testing.T) {
	h := `"token_sha256":["` + HashToken("x") + `"]`
	for name, tc := range map[string]struct{ json, want string }{
		"bad region":          {`{"region":"EU","tenants":[]}`, `bad-input (region): "EU" must match ^[a-z0-9][a-z0-9_-]{0,62}$`},
		"zone alone":          {`{"zone":"a","tenants":[]}`, "bad-input (zone): a zone needs a region"},
		"region not known":    {`{"region":"eu","residency":{"regions":["us"]},"tenants":[]}`, `bad-input (residency.regions): the node's region "eu" is not one of the deployment's regions [us]`},
		"tenant region":       {`{"region":"eu","tenants":[{"name":"a",` + h + `,"regions":["us"]}]}`, `bad-input (tenants[0].regions): region "us" is not one of the deployment's regions [eu]`},
		"public nats":         {`{"nats":{"listen":"0.0.0.0:4222"},"tenants":[]}`, `bad-input (nats.listen): the embedded NATS server listens on loopback only (want 127.0.0.1:PORT, not "0.0.0.0:4222"); use nats.url for a NATS across hosts`},
		"negative wait":       {`{"nats":{"accept_wait":"-1s"},"tenants":[]}`, "bad-input (nats.accept_wait): must not be negative"},
		"negative queue":      {`{"nats":{"queue_timeout":"-1m"},"tenants":[]}`, "bad-input (nats.queue_timeout): must not be negative"},
		"public route":        {`{"nats":{"cluster_listen":"10.0.0.1:6222"},"tenants":[]}`, `bad-input (nats.cluster_listen): the embedded NATS server listens on loopback only (want 127.0.0.1:PORT, not "10.0.0.1:6222"); use nats.url for a NATS across hosts`},
		"gateways alone":      {`{"nats":{"gateways":{"us":["nats://127.0.0.1:7222"]}},"tenants":[]}`, "bad-input (nats.gateways): gateways need nats.gateway_listen"},
		"public gateway":      {`{"nats":{"cluster_listen":"127.0.0.1:6222","gateway_listen":"0.0.0.0:7222"},"tenants":[]}`, `bad-input (nats.gateway_listen): the embedded NATS server listens on loopback only (want 127.0.0.1:PORT, not "0.0.0.0:7222"); use nats.url for a NATS across hosts`},
		"gateway, no cluster": {`{"nats":{"gateway_listen":"127.0.0.1:7222"},"tenants":[]}`, "bad-input (nats.gateway_listen): a gateway joins NATS clusters: it needs nats.cluster_listen"},
		"gateway to itself":   {`{"nats":{"cluster_name":"eu","cluster_listen":"127.0.0.1:6222","gateway_listen":"127.0.0.1:7222","gateways":{"eu":["nats://127.0.0.1:7223"]}},"tenants":[]}`, `bad-input (nats.gateways.eu): "eu" is this server's own cluster (nats.cluster_name)`},
		"remote gateway":      {`{"nats":{"cluster_name":"eu","cluster_listen":"127.0.0.1:6222","gateway_listen":"127.0.0.1:7222","gateways":{"us":["nats://10.0.0.2:7222"]}},"tenants":[]}`, `bad-input (nats.gateways.us): want nats://127.0.0.1:PORT (the embedded server dials loopback only), not "nats://10.0.0.2:7222"`},
		"gateway no port":     {`{"nats":{"cluster_name":"eu","cluster_listen":"127.0.0.1:6222","gateway_listen":"127.0.0.1:7222","gateways":{"us":["nats://127.0.0.1"]}},"tenants":[]}`, `bad-input (nats.gateways.us): want nats://127.0.0.1:PORT (the embedded server dials loopback only), not "nats://127.0.0.1"`},
		"gateway no urls":     {`{"nats":{"cluster_name":"eu","cluster_listen":"127.0.0.1:6222","gateway_listen":"127.0.0.1:7222","gateways":{"us":[]}},"tenants":[]}`, "bad-input (nats.gateways.us): no gateway URL"},
	} {
		_, err := Parse(strings.NewReader(tc.json))
		if err == nil || err.Error() != tc.want || sandbox.ClassOf(err) != sandbox.BadInput {
			t.Errorf("%s: got %v, want %s", name, err, tc.want)
		}
	}
	// A region's cluster joined to another by a gateway, on loopback.
	c, err := Parse(strings.NewReader(`{"nats":{"cluster_name":"eu","cluster_listen":"127.0.0.1:6222","gateway_listen":"127.0.0.1:7222","gateways":{"us":["nats://127.0.0.1:7223"]}},"tenants":[]}`))
	if err != nil || !slices.Equal(c.NATS.Gateways["us"], []string{"nats://127.0.0.1:7223"}) {
		t.Fatalf("a gateway: %+v %v", c.NATS, err)
	}
	// An external NATS may be anywhere: the operator runs it.
	if _, err := Parse(strings.NewReader(`{"nats":{"url":"nats://nats.example:4222","listen":"0.0.0.0:1"},"tenants":[]}`)); err != nil {
		t.Fatal(err)
	}
}
