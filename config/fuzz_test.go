package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// FuzzParse feeds the config loader arbitrary files. A refusal is BadInput;
// what is accepted was one JSON object, holds what validate promises, and
// is a fixed point: written back out and parsed again it is the same
// Config.
func FuzzParse(f *testing.F) {
	h := HashToken("x")
	tenant := `{"name":"acme","token_sha256":["` + h + `"]}`
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"tenants":[]}`,
		`{"tenants":[` + tenant + `]}`,
		`{"tenants":[` + tenant + `]}}`,
		`{"tenants":[` + tenant + `]}]`,
		`{"tenants":[` + tenant + `]} {"tenants":[]}`,
		`{"tenants":[` + tenant + `,` + tenant + `]}`,
		`{"tenants":[{"name":"Acme","token_sha256":["` + h + `"]}]}`,
		`{"tenants":[{"name":"a","token_sha256":["` + strings.ToUpper(h) + `"]}]}`,
		`{"tenants":[{"name":"a","token_sha256":["` + h + `"],"weight":-1}]}`,
		`{"tenants":[{"name":"a","token_sha256":["` + h + `"],"rate":1e400}]}`,
		`{"retention":"1h","retnetion":"2h"}`,
		`{"retention":"-1h"}`,
		`{"purge_every":"0s"}`,
		`{"max_wait":"9223372036854775807ns"}`,
		`{"max_body_bytes":1023}`,
		`{"concurrency":-1}`,
		`{"cgroup_reconcile":"none"}`,
		`{"pools":[{"min_warm":2,"max_warm":1}]}`,
		`{"pools":[{"max_live":1,"max_warm":2}]}`,
		`{"egress":{"enabled":true,"uplinks":["eth0"],"masquerade":true}}`,
		`{"Listen":":1"}`,
		`{"listen":":1","listen":":2"}`,
		"\xef\xbb\xbf{}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, sandbox.BadInput) {
				t.Fatalf("Parse = %v, want a BadInput error", err)
			}
			return
		}
		if !json.Valid(data) || bytes.TrimSpace(data)[0] != '{' {
			t.Fatalf("Parse accepted %q, which is not one JSON object", data)
		}
		if c.MaxBodyBytes < 1024 || c.PurgeEvery <= 0 || c.Concurrency <= 0 || len(c.Pools) == 0 {
			t.Fatalf("an accepted config lacks its defaults or bounds: %+v", c)
		}
		for _, tn := range c.Tenants {
			if !sandbox.ValidTenant(tn.Name) || len(tn.TokenSHA256) == 0 || tn.Weight < 1 {
				t.Fatalf("an accepted tenant is not valid: %+v", tn)
			}
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("an accepted config does not encode: %v", err)
		}
		again, err := Parse(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("an accepted config, written out, is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("parse is not a fixed point:\n%+v\n%+v", c, again)
		}
	})
}

// Regressions found by FuzzParse (issue #24): Parse took a stray closer
// after the object for its end (json.Decoder.More reports false before "}"
// and "]"), took "null" for an empty config, and cut a file over its bound
// short instead of refusing it, so what followed was never read.
func TestParseRefusesWhatIsNotOneObject(t *testing.T) {
	for name, data := range map[string]string{
		"stray brace":    `{"tenants":[]}}`,
		"stray bracket":  `{"tenants":[]}]`,
		"second object":  `{"tenants":[]} {}`,
		"null":           `null`,
		"array":          `[]`,
		"empty":          ``,
		"over the bound": `{"tenants":[]}` + strings.Repeat(" ", MaxFileBytes) + `{"listen":"0.0.0.0:80"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(data))
			if !errors.Is(err, sandbox.BadInput) {
				t.Fatalf("Parse = %v, want BadInput", err)
			}
		})
	}
}

// TestParseEmptyUplinksIsAFixedPoint is FuzzParse's crasher
// 577f08e49dbde792: "uplinks": [] parsed to an empty list, which the
// config written back (omitempty) left out, so it read back as no list.
func TestParseEmptyUplinksIsAFixedPoint(t *testing.T) {
	c, err := Parse(strings.NewReader(`{"egress":{"uplinks":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Egress.Uplinks != nil {
		t.Fatalf("uplinks = %#v, want nil", c.Egress.Uplinks)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(bytes.NewReader(out))
	if err != nil || !reflect.DeepEqual(c, again) {
		t.Fatalf("written back and read again: %v\n%+v\n%+v", err, c, again)
	}
}
