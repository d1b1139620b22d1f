package wasmcapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type ctxKey struct{}

// TestHostFunctions defines the rand component's one import in the host:
// the guest's call reaches the HostFunc with the context of the Call that
// made it; an error traps with its text and poisons the instance; a
// deadline error ends the call as a timeout; a result of the wrong type
// traps; a panic traps instead of crashing the process.
func TestHostFunctions(t *testing.T) {
	e := componentEngine(t)
	c := loadComponent(t, e, randComponent, false)
	var calls int
	behave := func(ctx context.Context, args []Val) (*Val, error) {
		calls++
		if len(args) != 0 {
			return nil, errors.New("args")
		}
		switch v := ctx.Value(ctxKey{}); v {
		case "fail":
			return nil, errors.New("the host says no")
		case "late":
			return nil, context.DeadlineExceeded
		case "type":
			return &Val{Kind: KindString, Str: "not a u64"}, nil
		case "panic":
			panic("host bug")
		case nil:
			return &Val{Kind: KindU64, Uint: 1}, nil
		default:
			return &Val{Kind: KindU64, Uint: uint64(len(v.(string)))}, nil
		}
	}
	l, err := e.NewLinker(false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Define("wasi:random/random@0.2.0", map[string]HostFunc{"get-random-u64": behave}); err != nil {
		t.Fatal(err)
	}
	if err := l.Define("wasi:random/random@0.2.0", map[string]HostFunc{"get-random-u64": behave}); err == nil {
		t.Error("an interface was defined twice")
	}
	roll, _ := c.Func("roll")
	call := func(ctxVal string) *CallResult {
		t.Helper()
		in, err := l.Instantiate(c, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		ctx := context.Background()
		if ctxVal != "" {
			ctx = context.WithValue(ctx, ctxKey{}, ctxVal)
		}
		r, err := in.Call(ctx, roll, nil, CallSpec{Fuel: 1e6, Wall: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r.End != CallOK != in.Poisoned() {
			t.Errorf("%q: end %s, poisoned %v", ctxVal, r.End, in.Poisoned())
		}
		return r
	}
	if r := call("seven!!"); r.End != CallOK || r.Result.Uint != 7 {
		t.Errorf("roll = %+v, want 7 from the call's context", r)
	}
	if r := call(""); r.End != CallOK || r.Result.Uint != 1 {
		t.Errorf("roll without a value = %+v", r)
	}
	for _, c := range []struct {
		ctx     string
		end     CallEnd
		message string
	}{
		{"fail", CallTrap, "the host says no"},
		{"late", CallTimeout, "context deadline exceeded"},
		{"type", CallTrap, "type mismatch"},
		{"panic", CallTrap, "wovyr: host function panicked: host bug"},
	} {
		if r := call(c.ctx); r.End != c.end || !strings.Contains(r.Message, c.message) {
			t.Errorf("%s: end %s %q, want %s containing %q", c.ctx, r.End, r.Message, c.end, c.message)
		}
	}
	if calls != 6 {
		t.Errorf("the host function ran %d times, want 6", calls)
	}
}
