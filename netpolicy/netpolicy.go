// Package netpolicy is the egress policy attached to an invocation. The zero
// Policy denies everything; rules only ever widen it, one named destination at
// a time. Enforcement lives in package egress, outside every sandbox; this
// package only describes and validates.
package netpolicy

// Policy is a default-deny egress allowlist.
type Policy struct {
	Allow []Rule `json:"allow,omitempty"`
}

// Rule allows one destination: either a CIDR or a DNS name (exact, or
// "*.suffix" for strict subdomains), on the listed ports.
type Rule struct {
	CIDR     string   `json:"cidr,omitempty"`
	Host     string   `json:"host,omitempty"`
	Ports    []uint16 `json:"ports,omitempty"`
	Protocol string   `json:"protocol,omitempty"` // "tcp" (default) or "udp"
}

// DenyAll reports whether the policy allows nothing at all. Backends that
// cannot enforce an allowlist accept only deny-all policies.
func (p Policy) DenyAll() bool { return len(p.Allow) == 0 }
