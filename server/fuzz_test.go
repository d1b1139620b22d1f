package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// fuzzBodyLimit is MaxBodyBytes for FuzzDecodeInvocation: small, so the
// fuzzer reaches the bound.
const fuzzBodyLimit = 4096

// FuzzDecodeInvocation feeds POST /v1/invocations' decoder and validation
// what a tenant could send, with and without a Content-Length. A refusal is
// a *sandbox.Error of class bad-input or too-large, and too-large only for
// a body over the bound; what is accepted and validates re-encodes to a
// body that decodes and validates again to the same encoding.
func FuzzDecodeInvocation(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}}}`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted"}} {}`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted","floor":"gvisor","preference":"native"}}`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":"trusted","floor":"strongest"}}`,
		`{"workload":{"kind":"command","argv":["/bin/true"]},"policy":{"trust":3}}`,
		`{"workload":{"kind":"command","argv":["a\u0000b"]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"],"env":["=v","K"]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"],"files":[{"path":"../etc/passwd","data":""}]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"],"files":[{"path":"/abs","data":"aGk="}]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"],"files":[{"path":"a/./b","data":"aGk=","mode":4095}]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"],"collect":["."]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"wasm","module":"AGFzbQEAAAA=","init":"wizer.initialize"},"policy":{"trust":"internal"}}`,
		`{"workload":{"kind":"wasm","module":"not base64"},"policy":{"trust":"internal"}}`,
		`{"workload":{"kind":"component","module":"AA==","init":"x"},"policy":{"trust":"internal"}}`,
		`{"workload":{"kind":"command","argv":["x"]},"limits":{"wall":-1,"memory":1},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"]},"limits":{"output":67108865},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"]},"limits":{"wall":1e30},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"]},"policy":{"trust":"hostile","network":{"allow":[{"host":"*.a.test","ports":[443]},{"cidr":"10.0.0.1/8","ports":[1]}]}}}`,
		`{"workload":{"kind":"command","argv":["x"]},"policy":{"trust":"trusted"},"resources":{"cpu":-1}}`,
		`{"workload":{"kind":"command","argv":["x"]},"policy":{"trust":"trusted"},"tenant":"acme","id":"Bad Id"}`,
		`{"workload":{"kind":"command","argv":["x"]},"policy":{"trust":"trusted"},"wrokload":{}}`,
		`{"workload":{"kind":"command","argv":["x"],"Argv":["y"]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["\ud800"]},"policy":{"trust":"trusted"}}`,
		`{"workload":{"kind":"command","argv":["x"]},"policy":{"trust":"trusted"}}` + strings.Repeat(" ", fuzzBodyLimit),
		`{"workload":{"kind":"command","argv":["` + strings.Repeat("a", fuzzBodyLimit) + `"]},"policy":{"trust":"trusted"}}`,
	} {
		f.Add([]byte(seed), true)
	}
	s := &Server{cfg: config.Config{MaxBodyBytes: fuzzBodyLimit}}
	decode := func(body []byte, withLength bool) (*sandbox.Invocation, error) {
		r := httptest.NewRequest("POST", "/v1/invocations", bytes.NewReader(body))
		if !withLength {
			r.ContentLength = -1 // chunked: only the reader's bound applies
		}
		return s.decodeInvocation(httptest.NewRecorder(), r)
	}
	f.Fuzz(func(t *testing.T, body []byte, withLength bool) {
		inv, err := decode(body, withLength)
		if err != nil {
			var e *sandbox.Error
			if !errors.As(err, &e) || (e.Class != sandbox.BadInput && e.Class != TooLarge) {
				t.Fatalf("decode = %v (%T), want a bad-input or too-large *sandbox.Error", err, err)
			}
			if e.Class == TooLarge && len(body) <= fuzzBodyLimit {
				t.Fatalf("a %d-byte body is too large for a %d-byte bound", len(body), fuzzBodyLimit)
			}
			return
		}
		if len(body) > fuzzBodyLimit {
			t.Fatalf("a %d-byte body passed a %d-byte bound", len(body), fuzzBodyLimit)
		}
		if inv.ID != "" || inv.Tenant != "" {
			return // the handler refuses both (its own checks)
		}
		inv.ID, inv.Tenant = "fuzz", "acme" // as the handler assigns them
		if err := inv.Validate(); err != nil {
			if sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) == "" {
				t.Fatalf("Validate = %v, want bad-input naming its field", err)
			}
			return
		}
		once, err := json.Marshal(inv)
		if err != nil {
			t.Fatalf("a valid invocation does not encode: %v", err)
		}
		if len(once) > fuzzBodyLimit {
			return // the encoding may be longer than the body (escapes)
		}
		again, err := decode(once, true)
		if err != nil {
			t.Fatalf("a valid invocation, re-encoded, is refused: %v\n%s", err, once)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("a valid invocation, re-encoded, does not validate: %v\n%s", err, once)
		}
		twice, err := json.Marshal(again)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("re-encoding is not stable (%v):\n%s\n%s", err, once, twice)
		}
	})
}
