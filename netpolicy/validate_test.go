package netpolicy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rule  Rule
		field string
	}{
		{"empty rule", Rule{Ports: []uint16{80}}, "host"},
		{"both", Rule{CIDR: "10.0.0.0/8", Host: "a.test", Ports: []uint16{80}}, "cidr"},
		{"bad cidr", Rule{CIDR: "10.0.0.300/8", Ports: []uint16{80}}, "cidr"},
		{"bare ip", Rule{CIDR: "10.0.0.1", Ports: []uint16{80}}, "cidr"},
		{"host bits", Rule{CIDR: "10.0.0.1/8", Ports: []uint16{80}}, "cidr"},
		{"mapped", Rule{CIDR: "::ffff:10.0.0.0/104", Ports: []uint16{80}}, "cidr"},
		{"empty name", Rule{Host: "", CIDR: "", Ports: []uint16{80}}, "host"},
		{"upper case", Rule{Host: "A.test", Ports: []uint16{80}}, "host"},
		{"one label", Rule{Host: "localhost", Ports: []uint16{80}}, "host"},
		{"decimal ip", Rule{Host: "2130706433", Ports: []uint16{80}}, "host"},
		{"short ip", Rule{Host: "127.1", Ports: []uint16{80}}, "host"},
		{"hex ip", Rule{Host: "0x7f.0x1", Ports: []uint16{80}}, "host"},
		{"dotted ip", Rule{Host: "10.0.0.1", Ports: []uint16{80}}, "host"},
		{"bare wildcard", Rule{Host: "*", Ports: []uint16{80}}, "host"},
		{"inner wildcard", Rule{Host: "a.*.test", Ports: []uint16{80}}, "host"},
		{"unicode", Rule{Host: "bücher.test", Ports: []uint16{80}}, "host"},
		{"underscore", Rule{Host: "a_b.test", Ports: []uint16{80}}, "host"},
		{"hyphen edge", Rule{Host: "-a.test", Ports: []uint16{80}}, "host"},
		{"no ports", Rule{Host: "a.test"}, "ports"},
		{"port 0", Rule{Host: "a.test", Ports: []uint16{443, 0}}, "ports"},
		{"bad proto", Rule{Host: "a.test", Ports: []uint16{80}, Protocol: "sctp"}, "protocol"},
		{"udp name", Rule{Host: "a.test", Ports: []uint16{53}, Protocol: "udp"}, "protocol"},
		{"quic", Rule{CIDR: "10.0.0.0/8", Ports: []uint16{443}, Protocol: "udp"}, "ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Allow: []Rule{{Host: "ok.test", Ports: []uint16{443}}, tc.rule}}
			err := p.Validate()
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want *Error wrapping ErrInvalid", err)
			}
			if e.Rule != 1 || e.Field != tc.field {
				t.Errorf("error at rule %d field %q, want rule 1 field %q (%v)", e.Rule, e.Field, tc.field, err)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	p := Policy{Allow: []Rule{
		{Host: "api.example.test", Ports: []uint16{443}},
		{Host: "*.cdn.test", Ports: []uint16{80, 443}, Protocol: "tcp"},
		{Host: "xn--bcher-kva.test", Ports: []uint16{443}},
		{CIDR: "10.1.0.0/16", Ports: []uint16{5432}},
		{CIDR: "2001:db8::/32", Ports: []uint16{443}},
		{CIDR: "192.0.2.0/24", Ports: []uint16{53}, Protocol: "udp"},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if (Policy{}).Validate() != nil || !(Policy{}).DenyAll() {
		t.Fatal("the zero policy is valid and denies all")
	}
}

func TestMatchHost(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"a.test", "a.test", true},
		{"a.test", "A.TEST.", true},
		{"a.test", "b.a.test", false},
		{"*.a.test", "b.a.test", true},
		{"*.a.test", "c.b.a.test", true},
		{"*.a.test", "a.test", false},
		{"*.a.test", "eva.test", false},
		{"*.a.test", "ba.test", false},
		{"*.a.test", "a.test.evil.test", false},
		{"*.a.test", ".a.test", false},
	} {
		if got := MatchHost(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	p := Policy{Allow: []Rule{{Host: "*.a.test", Ports: []uint16{443}}, {CIDR: "10.0.0.0/8", Ports: []uint16{80}}}}
	if !p.AllowsName("x.a.test", 443) || p.AllowsName("x.a.test", 80) || p.AllowsName("10.0.0.1", 80) {
		t.Error("AllowsName must check name and port, and never match CIDR rules")
	}
}

func TestExplicitlyNames(t *testing.T) {
	meta := netip.MustParsePrefix("169.254.0.0/16")
	for cidr, want := range map[string]bool{
		"169.254.169.254/32": true, "169.254.0.0/16": true, "0.0.0.0/0": false, "169.0.0.0/8": false, "::/0": false,
	} {
		if got := (Rule{CIDR: cidr}).ExplicitlyNames(meta); got != want {
			t.Errorf("ExplicitlyNames(%s) = %v, want %v", cidr, got, want)
		}
	}
}
