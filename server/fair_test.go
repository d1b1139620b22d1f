package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/config"
)

// TestFairStartsInWeightedOrder holds the only slot with a blocker, admits
// a backlog for tenants of weights 5, 1 and 1, and releases: the starts
// follow smooth weighted round-robin, a a b a c a a.
func TestFairStartsInWeightedOrder(t *testing.T) {
	cfg := config.Config{Concurrency: 1, Tenants: []config.Tenant{
		{Name: "a", Weight: 5}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}, {Name: "z", Weight: 1},
	}}
	f, err := NewFair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	blocker := Ticket{ID: "z0", Tenant: "z"}
	if err := f.Admit(blocker); err != nil {
		t.Fatal(err)
	}
	if err := f.Acquire(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	var tickets []Ticket
	for i := range 7 {
		for _, ten := range []string{"a", "b", "c"} {
			tk := Ticket{ID: fmt.Sprintf("%s%d", ten, i), Tenant: ten}
			if err := f.Admit(tk); err != nil {
				t.Fatal(err)
			}
			tickets = append(tickets, tk)
		}
	}
	if f.Queued() != 21 {
		t.Fatalf("queued %d, want 21", f.Queued())
	}
	order := make(chan string, len(tickets))
	for _, tk := range tickets {
		go func() {
			if err := f.Acquire(ctx, tk); err == nil {
				order <- tk.Tenant
				f.Done(tk) // frees the slot for the next pick
			}
		}()
	}
	f.Done(blocker)
	var got []string
	for range 7 {
		got = append(got, <-order)
	}
	if s := strings.Join(got, " "); s != "a a b a c a a" {
		t.Fatalf("start order %q, want %q", s, "a a b a c a a")
	}
}

func TestFairQueueBoundIsRateLimited(t *testing.T) {
	f, err := NewFair(config.Config{Concurrency: 1, Tenants: []config.Tenant{{Name: "a", Weight: 1, MaxPending: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // one starts at once, two queue
		if err := f.Admit(Ticket{ID: fmt.Sprint(i), Tenant: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	err = f.Admit(Ticket{ID: "over", Tenant: "a"})
	if !errors.Is(err, RateLimited) {
		t.Fatalf("over the queue bound: %v, want rate-limited", err)
	}
}

func TestFairCancelWhileQueued(t *testing.T) {
	f, _ := NewFair(config.Config{Concurrency: 1, Tenants: []config.Tenant{{Name: "a", Weight: 1}}})
	first, second := Ticket{ID: "1", Tenant: "a"}, Ticket{ID: "2", Tenant: "a"}
	f.Admit(first)
	f.Admit(second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Acquire(ctx, second); err == nil {
		t.Fatal("a queued ticket started while the slot was taken")
	}
	f.Done(second) // withdrawn before it started
	f.Done(first)
	if f.Queued() != 0 {
		t.Fatalf("queued %d after both ended", f.Queued())
	}
	third := Ticket{ID: "3", Tenant: "a"}
	f.Admit(third)
	if err := f.Acquire(context.Background(), third); err != nil {
		t.Fatalf("the slot was not freed: %v", err)
	}
}
