package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// FuzzValidate decodes a policy as the API does and validates it. A policy
// that validates has only well-formed rules (checked here independently of
// validate's own code); one that does not gets an *Error wrapping
// ErrInvalid that names a rule in range and a known field; and the verdict
// survives re-encoding. Its name and port probe the matchers: a wildcard
// never matches its own suffix or a name that merely ends with it.
func FuzzValidate(f *testing.F) {
	for _, seed := range []struct {
		policy, name string
		port         uint16
	}{
		{`{}`, "a.test", 443},
		{`{"allow":[{"host":"api.example.test","ports":[443]}]}`, "API.example.test.", 443},
		{`{"allow":[{"host":"*.cdn.test","ports":[80,443]}]}`, "cdn.test", 443},
		{`{"allow":[{"host":"*.cdn.test","ports":[443]}]}`, "evilcdn.test", 443},
		{`{"allow":[{"host":"*.cdn.test","ports":[443]}]}`, "a.b.cdn.test", 443},
		{`{"allow":[{"host":"*","ports":[443]}]}`, "x.test", 443},
		{`{"allow":[{"host":"*.*.test","ports":[443]}]}`, "a.b.test", 443},
		{`{"allow":[{"host":"a..test","ports":[443]}]}`, "a..test", 443},
		{`{"allow":[{"host":"127.1","ports":[80]}]}`, "127.1", 80},
		{`{"allow":[{"host":"0x7f.0x1","ports":[80]}]}`, "0x7f.0x1", 80},
		{`{"allow":[{"host":"xn--bcher-kva.test","ports":[443]}]}`, "bücher.test", 443},
		{`{"allow":[{"host":"a.test\u0000","ports":[443]}]}`, "a.test", 443},
		{`{"allow":[{"cidr":"0.0.0.0/0","ports":[443]}]}`, "", 443},
		{`{"allow":[{"cidr":"10.0.0.1/8","ports":[443]}]}`, "", 443},
		{`{"allow":[{"cidr":"::ffff:10.0.0.0/104","ports":[443]}]}`, "", 443},
		{`{"allow":[{"cidr":"fe80::1%eth0/128","ports":[443]}]}`, "", 443},
		{`{"allow":[{"cidr":"169.254.169.254/32","ports":[80]}]}`, "", 80},
		{`{"allow":[{"cidr":"10.0.0.0/33","ports":[80]}]}`, "", 80},
		{`{"allow":[{"cidr":"010.0.0.0/8","ports":[80]}]}`, "", 80},
		{`{"allow":[{"cidr":"192.0.2.0/24","ports":[443],"protocol":"udp"}]}`, "", 443},
		{`{"allow":[{"cidr":"192.0.2.0/24","ports":[53],"protocol":"UDP"}]}`, "", 53},
		{`{"allow":[{"host":"a.test","ports":[53],"protocol":"udp"}]}`, "a.test", 53},
		{`{"allow":[{"host":"a.test","ports":[0]}]}`, "a.test", 0},
		{`{"allow":[{"host":"a.test","ports":[65536]}]}`, "a.test", 1},
		{`{"allow":[{"host":"a.test","ports":[-1]}]}`, "a.test", 1},
		{`{"allow":[{"host":"a.test"}]}`, "a.test", 1},
		{`{"allow":[{"host":"a.test","cidr":"10.0.0.0/8","ports":[1]}]}`, "a.test", 1},
		{`{"allow":[{}]}`, "", 1},
		{`{"allow":[` + strings.Repeat(`{"host":"a.test","ports":[1]},`, MaxRules) + `{"host":"a.test","ports":[1]}]}`, "a.test", 1},
		{`{"allow":[{"host":"` + strings.Repeat("a", 64) + `.test","ports":[443]}]}`, "", 443},
		{`{"allow":[{"host":"` + strings.Repeat("a.", 127) + `test","ports":[443]}]}`, "", 443},
	} {
		f.Add([]byte(seed.policy), seed.name, seed.port)
	}
	f.Fuzz(func(t *testing.T, data []byte, name string, port uint16) {
		var p Policy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		err := p.Validate()
		again, encErr := json.Marshal(p)
		if encErr != nil {
			t.Fatalf("a decoded policy does not encode: %v", encErr)
		}
		var q Policy
		if err := json.Unmarshal(again, &q); err != nil {
			t.Fatalf("a re-encoded policy does not decode: %v", err)
		}
		if qerr := q.Validate(); fmt.Sprint(qerr) != fmt.Sprint(err) {
			t.Fatalf("the verdict changed on re-encoding: %v, then %v", err, qerr)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v (%T), want an *Error wrapping ErrInvalid", err, err)
			}
			if e.Rule < 0 || e.Rule > len(p.Allow) || !strings.Contains("cidr host ports protocol allow", e.Field) {
				t.Fatalf("the error names rule %d field %q of %d rules", e.Rule, e.Field, len(p.Allow))
			}
			return
		}
		for i, r := range p.Allow {
			if msg := wellFormed(r); msg != "" {
				t.Fatalf("rule %d %+v validated, but %s", i, r, msg)
			}
		}
		if p.AllowsName(name, port) && !p.AllowsNameAnyPort(name) {
			t.Fatalf("%q:%d is allowed on its port but not on any port", name, port)
		}
		canon := CanonicalName(name)
		for _, r := range p.Allow {
			suffix, wild := strings.CutPrefix(r.Host, "*.")
			if r.Host == "" || !MatchHost(r.Host, name) {
				continue
			}
			if wild && (canon == suffix || !strings.HasSuffix(canon, "."+suffix)) {
				t.Fatalf("%q matches %q but is not a strict subdomain of %q", name, r.Host, suffix)
			}
			if !wild && canon != r.Host {
				t.Fatalf("%q matches the exact name %q", name, r.Host)
			}
		}
	})
}

// wellFormed restates Validate's contract for one rule: "" if r keeps it.
func wellFormed(r Rule) string {
	if (r.CIDR == "") == (r.Host == "") {
		return "it does not name exactly one of cidr and host"
	}
	if r.CIDR != "" {
		pfx, err := netip.ParsePrefix(r.CIDR)
		if err != nil || pfx.Masked() != pfx || pfx.Addr().Zone() != "" || pfx.Addr().Is4In6() {
			return "its cidr is not a canonical prefix"
		}
	} else {
		name, _ := strings.CutPrefix(r.Host, "*.")
		if strings.Contains(name, "*") || !ValidName(name) || CanonicalName(name) != name {
			return "its host is not a lower-case name or *.name"
		}
		if _, err := netip.ParseAddr(name); err == nil {
			return "its host is an IP address"
		}
	}
	if len(r.Ports) == 0 {
		return "it lists no port"
	}
	for _, port := range r.Ports {
		if port == 0 || r.Proto() == "udp" && port == 443 {
			return fmt.Sprintf("it allows port %d/%s", port, r.Proto())
		}
	}
	if r.Proto() != "tcp" && (r.Proto() != "udp" || r.Host != "") {
		return "its protocol is neither tcp nor udp to a cidr"
	}
	return ""
}
