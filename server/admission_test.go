package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wovyr/wovyr/config"
)

func limiter(capacity int, tenants ...config.Tenant) *Limiter {
	return NewLimiter(config.Config{Concurrency: capacity, Tenants: tenants})
}

func granted(t *testing.T, l *Limiter, tk Ticket) chan error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- l.Acquire(context.Background(), tk) }()
	return ch
}

func pending(ch chan error) bool {
	select {
	case <-ch:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

func TestLimiterCapacityAndOrder(t *testing.T) {
	l := limiter(1)
	a, b, c := Ticket{ID: "a", Tenant: "x"}, Ticket{ID: "b", Tenant: "x"}, Ticket{ID: "c", Tenant: "y"}
	for _, tk := range []Ticket{a, b, c} {
		if err := l.Admit(tk); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Acquire(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	chB := granted(t, l, b)
	time.Sleep(20 * time.Millisecond) // b queues before c
	chC := granted(t, l, c)
	if !pending(chB) || !pending(chC) || l.Queued() != 2 {
		t.Fatalf("capacity 1 let a second ticket start (queued %d)", l.Queued())
	}
	l.Done(a)
	if err := <-chB; err != nil {
		t.Fatal(err)
	}
	if !pending(chC) {
		t.Fatal("c started before b finished")
	}
	l.Done(b)
	if err := <-chC; err != nil {
		t.Fatal(err)
	}
	l.Done(c)
	if l.running != 0 || len(l.pending) != 0 || len(l.active) != 0 || len(l.started) != 0 {
		t.Fatalf("leftover state %+v", l)
	}
}

func TestLimiterTenantQuotas(t *testing.T) {
	l := limiter(4, config.Tenant{Name: "x", MaxPending: 2, MaxRunning: 1})
	a, b, c, d := Ticket{ID: "a", Tenant: "x"}, Ticket{ID: "b", Tenant: "x"}, Ticket{ID: "c", Tenant: "x"}, Ticket{ID: "d", Tenant: "y"}
	l.Admit(a)
	l.Admit(b)
	if err := l.Admit(c); !errors.Is(err, RateLimited) {
		t.Fatalf("third pending of x: %v, want rate-limited", err)
	}
	l.Admit(d)
	l.Acquire(context.Background(), a)
	chB := granted(t, l, b)
	if !pending(chB) {
		t.Fatal("x ran two at once with max_running 1")
	}
	// A tenant at its quota does not block another tenant behind it.
	if err := l.Acquire(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	l.Done(a)
	if err := <-chB; err != nil {
		t.Fatal(err)
	}
}

func TestLimiterCancelWhileQueued(t *testing.T) {
	l := limiter(1)
	a, b := Ticket{ID: "a", Tenant: "x"}, Ticket{ID: "b", Tenant: "x"}
	l.Admit(a)
	l.Admit(b)
	l.Acquire(context.Background(), a)
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- l.Acquire(ctx, b) }()
	time.Sleep(20 * time.Millisecond)
	cancel(errors.New("gone"))
	if err := <-ch; err == nil || l.Queued() != 0 {
		t.Fatalf("cancelled acquire: %v, queued %d", err, l.Queued())
	}
	l.Done(b)
	l.Done(a)
	if l.running != 0 || len(l.pending) != 0 {
		t.Fatalf("leftover state running=%d pending=%v", l.running, l.pending)
	}
}

// TestTryAcquire: both admissions start a ticket at once only when it may
// start now — never past a ticket that waits in Acquire, never past the
// capacity — and a refusal changes nothing: Acquire then waits as before.
func TestTryAcquire(t *testing.T) {
	a, b, c := Ticket{ID: "a", Tenant: "x"}, Ticket{ID: "b", Tenant: "x"}, Ticket{ID: "c", Tenant: "x"}
	t.Run("limiter", func(t *testing.T) {
		l := limiter(1)
		for _, tk := range []Ticket{a, b, c} {
			l.Admit(tk)
		}
		if !l.TryAcquire(a) {
			t.Fatal("a did not start on an idle node")
		}
		if l.TryAcquire(b) {
			t.Fatal("b started beyond the capacity")
		}
		wb := granted(t, l, b)
		if !pending(wb) {
			t.Fatal("b's Acquire after a refused TryAcquire did not wait")
		}
		l.Done(a)
		if err := <-wb; err != nil {
			t.Fatal(err)
		}
		l.Done(b)
		wc := granted(t, l, c)
		if err := <-wc; err != nil {
			t.Fatal(err)
		}
		if l.TryAcquire(Ticket{ID: "d", Tenant: "x"}) {
			t.Fatal("d started beyond the capacity")
		}
	})
	t.Run("fair", func(t *testing.T) {
		f, err := NewFair(config.Config{Concurrency: 1, Tenants: []config.Tenant{{Name: "x", Weight: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if f.TryAcquire(a) {
			t.Fatal("a ticket never admitted started")
		}
		f.Admit(a)
		f.Admit(b)
		if !f.TryAcquire(a) || f.TryAcquire(b) {
			t.Fatal("want a started (picked at Admit) and b waiting")
		}
		f.Done(a)
		if !f.TryAcquire(b) {
			t.Fatal("b was not started when a's capacity freed")
		}
		if err := f.Acquire(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	})
}
