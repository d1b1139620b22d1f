package pool

import "testing"

// tenantBackends lists every backend the cross-tenant test runs on.
func tenantBackends() []tenantBackend {
	proc := func(reset string) func(*testing.T) Factory {
		return func(*testing.T) Factory { return procboxFactory(reset) }
	}
	return []tenantBackend{
		{name: "procbox-destroy", factory: proc("")},
		{name: "procbox-verified-reset", factory: proc("verified")},
		{name: "procbox-lying-reset-control", factory: proc("lying"), leaks: true},
	}
}
