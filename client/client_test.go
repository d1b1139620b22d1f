package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func TestErrorsKeepTheirClass(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/invocations/limited":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
			w.Write([]byte(`{"code":"rate-limited","message":"slow down"}`))
		case "/v1/invocations/bad":
			w.WriteHeader(400)
			w.Write([]byte(`{"code":"bad-input","message":"bad-input (policy.trust): no","field":"policy.trust"}`))
		default:
			w.WriteHeader(502)
			w.Write([]byte("proxy says no"))
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "t", nil)
	ctx := context.Background()

	_, err := c.Get(ctx, "limited", 0)
	var e *Error
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != 7*time.Second || sandbox.ClassOf(err) != "rate-limited" {
		t.Fatalf("429: %#v", err)
	}
	_, err = c.Get(ctx, "bad", 0)
	if !errors.Is(err, sandbox.BadInput) || sandbox.ClassOf(err) != sandbox.BadInput || err.Error() != "bad-input (policy.trust): no" {
		t.Fatalf("400: %v", err)
	}
	if errors.As(err, &e); e.Field != "policy.trust" {
		t.Fatalf("field %q", e.Field)
	}
	// A non-API answer (a proxy's) is a backend failure with the text kept.
	_, err = c.Get(ctx, "other", 0)
	if sandbox.ClassOf(err) != sandbox.BackendFailure || !IsStatus(err, 502) {
		t.Fatalf("502: %v", err)
	}
}

func TestResultOf(t *testing.T) {
	res := &sandbox.Result{ExitCode: 3}
	if got, err := ResultOf(&Invocation{State: StateDone, Result: res}); err != nil || got != res {
		t.Fatalf("done: %v %v", got, err)
	}
	_, err := ResultOf(&Invocation{State: StateFailed, Result: &sandbox.Result{Class: sandbox.FloorUnmet, Error: "floor-unmet: none"}})
	if !errors.Is(err, sandbox.FloorUnmet) || err.Error() != "floor-unmet: none" {
		t.Fatalf("failed: %v", err)
	}
	lost := &sandbox.Result{Class: sandbox.Lost, Error: "daemon-restart"}
	if got, err := ResultOf(&Invocation{State: StateLost, Result: lost}); err != nil || got.Class != sandbox.Lost {
		t.Fatalf("lost: %v %v", got, err)
	}
	if _, err := ResultOf(&Invocation{ID: "x", State: StateDone}); sandbox.ClassOf(err) != sandbox.BackendFailure {
		t.Fatalf("no result: %v", err)
	}
}
