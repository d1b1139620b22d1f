package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// tenant is a configured tenant and its live rate guard.
type tenant struct {
	cfg  config.Tenant
	rate *bucket
}

// authenticate finds the tenant whose token the request bears. Tokens are
// compared as SHA-256 digests, the form the config holds, in constant time.
func (s *Server) authenticate(r *http.Request) (*tenant, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return nil, sandbox.Errorf(Unauthenticated, "", "a bearer token is required (Authorization: Bearer TOKEN)")
	}
	sum := sha256.Sum256([]byte(tok))
	var found *tenant
	for _, t := range s.tenants {
		for _, want := range t.cfg.TokenSHA256 {
			w, _ := hex.DecodeString(want)
			if subtle.ConstantTimeCompare(sum[:], w) == 1 {
				found = t
			}
		}
	}
	if found == nil {
		return nil, sandbox.Errorf(Unauthenticated, "", "unknown bearer token")
	}
	return found, nil
}

type ctxKey struct{}

// authed wraps h so that it runs only for an authenticated caller, and for
// admin-only routes only for an admin.
func (s *Server) authed(admin bool, h func(http.ResponseWriter, *http.Request, *tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := s.authenticate(r)
		if err != nil {
			s.writeError(w, err)
			return
		}
		if admin && !t.cfg.Admin {
			s.writeError(w, sandbox.Errorf(Forbidden, "", "this needs an admin token"))
			return
		}
		h(w, r, t)
	}
}
