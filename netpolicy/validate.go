package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrInvalid is wrapped by every validation error, so callers can test with
// errors.Is without knowing the rule at fault. (netpolicy cannot import
// package sandbox, which imports it; callers map ErrInvalid to BadInput.)
var ErrInvalid = errors.New("invalid network policy")

// Error is a validation error: the rule index, the field at fault
// (e.g. "allow[2].ports") and why.
type Error struct {
	Rule  int    // index into Policy.Allow
	Field string // "cidr", "host", "ports" or "protocol"
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("network.allow[%d].%s: %s", e.Rule, e.Field, e.Msg)
}

// Path is the input path of the offending field, e.g. "policy.network.allow[1].cidr".
func (e *Error) Path() string { return fmt.Sprintf("policy.network.allow[%d].%s", e.Rule, e.Field) }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// MaxRules bounds a policy: rules become nftables rules and proxy checks.
const MaxRules = 256

// Validate checks p strictly: every rule names exactly one of CIDR or Host,
// CIDRs are canonical (no host bits), host names are valid DNS names or
// "*.suffix", at least one port is listed, no port is 0, and the protocol is
// "tcp", "udp" or empty. It returns an *Error.
func (p Policy) Validate() error {
	if len(p.Allow) > MaxRules {
		return &Error{Rule: MaxRules, Field: "allow", Msg: fmt.Sprintf("more than %d rules", MaxRules)}
	}
	for i, r := range p.Allow {
		if err := r.validate(); err != nil {
			err.Rule = i
			return err
		}
	}
	return nil
}

func (r Rule) validate() *Error {
	switch {
	case r.CIDR == "" && r.Host == "":
		return &Error{Field: "host", Msg: "a rule names a cidr or a host; both are empty"}
	case r.CIDR != "" && r.Host != "":
		return &Error{Field: "cidr", Msg: "a rule names a cidr or a host, not both"}
	}
	if r.CIDR != "" {
		pfx, err := netip.ParsePrefix(r.CIDR)
		if err != nil {
			return &Error{Field: "cidr", Msg: fmt.Sprintf("bad CIDR %q: %v", r.CIDR, err)}
		}
		if pfx.Masked() != pfx {
			return &Error{Field: "cidr", Msg: fmt.Sprintf("CIDR %q has host bits set (want %s)", r.CIDR, pfx.Masked())}
		}
		if pfx.Addr().Zone() != "" || pfx.Addr().Is4In6() {
			return &Error{Field: "cidr", Msg: fmt.Sprintf("CIDR %q must be plain IPv4 or IPv6", r.CIDR)}
		}
	} else if err := validPattern(r.Host); err != nil {
		return &Error{Field: "host", Msg: err.Error()}
	}
	if len(r.Ports) == 0 {
		return &Error{Field: "ports", Msg: "at least one port is required"}
	}
	for _, p := range r.Ports {
		if p == 0 {
			return &Error{Field: "ports", Msg: "port 0 is not a port"}
		}
	}
	switch r.Protocol {
	case "", "tcp":
	case "udp":
		if r.Host != "" {
			return &Error{Field: "protocol", Msg: "udp is allowed to CIDRs only: a name cannot be checked on datagrams"}
		}
		for _, p := range r.Ports {
			if p == 443 {
				return &Error{Field: "ports", Msg: "udp/443 (QUIC) is never allowed: names cannot be checked on it"}
			}
		}
	default:
		return &Error{Field: "protocol", Msg: fmt.Sprintf("protocol %q: want tcp or udp", r.Protocol)}
	}
	return nil
}

// Proto returns the rule's protocol with the default applied.
func (r Rule) Proto() string {
	if r.Protocol == "" {
		return "tcp"
	}
	return r.Protocol
}

// validPattern checks an exact name or "*.suffix".
func validPattern(h string) error {
	if h == "" {
		return errors.New("empty host name")
	}
	name := h
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		name = rest
	}
	if CanonicalName(name) != name {
		return fmt.Errorf("host %q is not a lower-case DNS name (want %q)", h, CanonicalName(name))
	}
	return validName(name)
}

// validName checks a fully written DNS name: letters, digits and hyphens in
// labels of 1..63, at most 253 bytes, at least two labels, and a final label
// that is not all digits (so "2130706433" or "127.1" are never names).
func validName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("host %q: a DNS name has 1..253 bytes", n)
	}
	labels := strings.Split(n, ".")
	if len(labels) < 2 {
		return fmt.Errorf("host %q: a DNS name needs at least two labels", n)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("host %q: empty or over-long label", n)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host %q: a label must not start or end with '-'", n)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("host %q: byte %q is not allowed in a name (punycode is written as xn--)", n, c)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return fmt.Errorf("host %q looks like a numeric address, not a name", n)
	}
	return nil
}

// CanonicalName lower-cases n and strips one trailing dot. It does not
// validate; ValidName does.
func CanonicalName(n string) string { return strings.ToLower(strings.TrimSuffix(n, ".")) }

// ValidName reports whether n, canonicalised, is a DNS name a client may ask
// for. IP literals in any spelling are not names.
func ValidName(n string) bool { return validName(CanonicalName(n)) == nil }

// MatchHost reports whether name matches pattern: exactly, or, for
// "*.suffix", as a strict subdomain of suffix (never suffix itself, never
// "evilsuffix"). name is canonicalised first; patterns are validated.
func MatchHost(pattern, name string) bool {
	name = CanonicalName(name)
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+suffix) && len(name) > len(suffix)+1
	}
	return name == pattern
}

// AllowsName reports whether a tcp connection to name:port is allowed by a
// host rule. CIDR rules never allow a name.
func (p Policy) AllowsName(name string, port uint16) bool {
	for _, r := range p.Allow {
		if r.Host != "" && r.Proto() == "tcp" && hasPort(r.Ports, port) && MatchHost(r.Host, name) {
			return true
		}
	}
	return false
}

// AllowsNameAnyPort reports whether some host rule matches name (the DNS
// stub answers such names; the port is checked at connect time).
func (p Policy) AllowsNameAnyPort(name string) bool {
	for _, r := range p.Allow {
		if r.Host != "" && MatchHost(r.Host, name) {
			return true
		}
	}
	return false
}

func hasPort(ps []uint16, p uint16) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
