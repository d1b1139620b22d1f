package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/sandbox"
)

// jobKind is one entry of the soak's mix.
type jobKind int

const (
	echoNative    jobKind = iota // sh writes the nonce to the ledger, then prints it and size bytes
	echoWasm                     // a WASI module prints its argv[1], the nonce
	echoContainer                // busybox echo of the nonce on the container backend
	echoGVisor                   // the same, untrusted: gVisor
	timeoutNative                // sleeps past a 300 ms wall limit
	oomNative                    // a memory hog under a 32 MiB limit
	cancelNative                 // a long sleep cancelled by DELETE
	abandonNative                // a short sleep whose long poll the client abandons
	badRequest                   // malformed or invalid: 400, nothing recorded
	numKinds
)

var kindNames = [numKinds]string{"echo-native", "echo-wasm", "echo-container", "echo-gvisor", "timeout", "oom", "cancel", "abandoned-wait", "bad-request"}

func (k jobKind) String() string { return kindNames[k] }

// mix is the relative frequency of each kind, per mille.
type mix [numKinds]int

func (m mix) pick(r *rand.Rand) jobKind {
	total := 0
	for _, w := range m {
		total += w
	}
	n := r.Intn(total)
	for k, w := range m {
		if n < w {
			return jobKind(k)
		}
		n -= w
	}
	panic("unreachable")
}

// accepted is one invocation the daemon answered with an id.
type accepted struct {
	id, nonce, tenant string
	kind              jobKind
	size              int  // echo-native's extra output bytes
	cancelled         bool // a DELETE was sent for it
}

// load is the soak's clients: per tenant a few workers, each with one
// invocation outstanding at a time, against whichever daemon is up.
type load struct {
	cur     atomic.Pointer[daemon]
	tenants []tenantSpec
	mix     mix
	module  []byte // echo-wasm's module
	ledger  string // the file native jobs append their nonce to
	marker  string // prefix of every nonce: this soak's

	mu       sync.Mutex
	accepted []accepted
	problems []string // failures of the API contract, reported by the test

	nAccepted, nRefused, nDown, nInDoubt, nBad atomic.Int64
}

func (l *load) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.problems) < 50 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

func (l *load) client(tn tenantSpec) (*client.Client, *daemon) {
	d := l.cur.Load()
	return client.New(d.url, tn.token, nil), d
}

// down reports whether err means the daemon is gone (killed or
// restarting) rather than an answer from it.
func down(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Status == http.StatusServiceUnavailable
	}
	return err != nil
}

// pause waits a little before retrying against a daemon that is down.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// worker submits jobs until ctx ends or the soak has accepted target.
func (l *load) worker(ctx context.Context, tn tenantSpec, r *rand.Rand, target int64, seq *atomic.Int64) {
	for ctx.Err() == nil && l.nAccepted.Load() < target {
		k := l.mix.pick(r)
		nonce := fmt.Sprintf("%s-%d", l.marker, seq.Add(1))
		if k == badRequest {
			l.badRequest(ctx, tn, r)
			continue
		}
		a := accepted{nonce: nonce, tenant: tn.name, kind: k, size: []int{0, 100, 4096, 65536}[r.Intn(4)]}
		l.run(ctx, tn, r, a)
	}
}

// run submits one job and follows it to its end.
func (l *load) run(ctx context.Context, tn tenantSpec, r *rand.Rand, a accepted) {
	// Submit without waiting, so that the id comes back at once and a
	// kill cuts off as few answers as possible; follow polls it.
	c, _ := l.client(tn)
	rec, err := c.Submit(ctx, l.invocation(a), 0)
	var ce *client.Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return
	case errors.As(err, &ce) && (ce.Status == http.StatusTooManyRequests || ce.Status == http.StatusServiceUnavailable):
		l.nRefused.Add(1)
		pause(ctx)
		return
	case errors.As(err, &ce):
		l.problem("%s %s: submit refused: %d %s", tn.name, a.kind, ce.Status, ce.Message)
		return
	case errors.Is(err, syscall.ECONNREFUSED):
		// No daemon listens (it is restarting): nothing was sent.
		l.nDown.Add(1)
		pause(ctx)
		return
	default:
		// The daemon died with the request in flight: it may or may not
		// have recorded it. The store scan accounts for these.
		l.nInDoubt.Add(1)
		pause(ctx)
		return
	}
	a.id = rec.ID
	l.nAccepted.Add(1)
	switch a.kind {
	case cancelNative:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(r.Intn(100)) * time.Millisecond):
		}
		a.cancelled = true
		if _, err := c.Cancel(ctx, a.id); err != nil && !client.IsStatus(err, http.StatusConflict) && !down(err) && ctx.Err() == nil {
			l.problem("%s cancel %s: %v", tn.name, a.id, err)
		}
	case abandonNative:
		pctx, cancel := context.WithTimeout(ctx, time.Duration(1+r.Intn(20))*time.Millisecond)
		c.Get(pctx, a.id, 10*time.Second) // the poll is abandoned; the invocation goes on
		cancel()
	}
	l.mu.Lock()
	l.accepted = append(l.accepted, a)
	l.mu.Unlock()
	if !client.Terminal(rec.State) {
		l.follow(ctx, tn, a.id)
	}
}

// follow long-polls id until it is terminal, across daemon restarts.
func (l *load) follow(ctx context.Context, tn tenantSpec, id string) *client.Invocation {
	for ctx.Err() == nil {
		c, _ := l.client(tn)
		rec, err := c.Get(ctx, id, 10*time.Second)
		switch {
		case err == nil && client.Terminal(rec.State):
			return rec
		case err == nil:
		case down(err):
			pause(ctx)
		default:
			if ctx.Err() == nil {
				l.problem("%s get %s: %v", tn.name, id, err)
			}
			return nil
		}
	}
	return nil
}

// badBodies are requests the API must refuse with 400 bad-input naming
// field, recording nothing.
var badBodies = []struct{ body, field string }{
	{`{"workload": {"kind": "command", "argv": ["/bin/true"]`, ""},
	{`{"workload": {"kind": "command", "argv": ["/bin/true"]}, "policy": {"trust": "trusted"}, "surprise": 1}`, "surprise"},
	{`{"workload": {"kind": "command", "argv": ["/bin/true"]}, "policy": {"trust": "trusted"}, "limits": {"wall": -1}}`, "limits.wall"},
	{`{"workload": {"kind": "command", "argv": ["/bin/true"]}, "policy": {"trust": "trusted"}, "limits": {"memory": -5}}`, "limits.memory"},
	{`{"workload": {"kind": "command", "argv": []}, "policy": {"trust": "trusted"}}`, "workload.argv"},
}

// badRequest posts one of badBodies and checks the answer.
func (l *load) badRequest(ctx context.Context, tn tenantSpec, r *rand.Rand) {
	bad := badBodies[r.Intn(len(badBodies))]
	d := l.cur.Load()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/invocations", strings.NewReader(bad.body))
	if err != nil {
		l.problem("bad request: %v", err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+tn.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pause(ctx)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
		return
	case resp.StatusCode != http.StatusBadRequest || !bytes.Contains(body, []byte(`"code":"bad-input"`)):
		l.problem("bad request %q: %d %s", bad.body, resp.StatusCode, body)
	case bad.field != "" && !bytes.Contains(body, []byte(`"field":"`+bad.field+`"`)):
		l.problem("bad request %q names the wrong field: %s", bad.body, body)
	}
	l.nBad.Add(1)
}

// invocation is the request for a.
func (l *load) invocation(a accepted) *sandbox.Invocation {
	sh := func(script string, lim sandbox.Limits) *sandbox.Invocation {
		return &sandbox.Invocation{
			Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", "echo $0 >>" + l.ledger + "; " + script, a.nonce, strconv.Itoa(a.size)}},
			Limits:   lim,
			Policy:   sandbox.Policy{Trust: sandbox.Trusted},
		}
	}
	switch a.kind {
	case echoNative:
		return sh("echo $0; head -c $1 /dev/zero", sandbox.Limits{Wall: 20 * time.Second})
	case echoWasm:
		return &sandbox.Invocation{
			Workload: sandbox.Workload{Kind: sandbox.KindWasm, Module: l.module, Argv: []string{"echo", a.nonce}},
			Limits:   sandbox.Limits{Wall: 20 * time.Second},
			Policy:   sandbox.Policy{Trust: sandbox.Internal},
		}
	case echoContainer, echoGVisor:
		p := sandbox.Policy{Trust: sandbox.Trusted, Preference: sandbox.Container}
		if a.kind == echoGVisor {
			p = sandbox.Policy{Trust: sandbox.Untrusted}
		}
		return &sandbox.Invocation{
			Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/echo", a.nonce}},
			Limits:   sandbox.Limits{Wall: 20 * time.Second},
			Policy:   p,
		}
	case timeoutNative:
		return sh("exec /bin/sleep 5", sandbox.Limits{Wall: 300 * time.Millisecond})
	case oomNative:
		return sh("head -c 512m /dev/zero | tail", sandbox.Limits{Wall: 20 * time.Second, Memory: hogLimit})
	case cancelNative:
		return sh("exec /bin/sleep 30", sandbox.Limits{Wall: 20 * time.Second})
	case abandonNative:
		return sh("/bin/sleep 0.1; echo $0", sandbox.Limits{Wall: 20 * time.Second})
	}
	panic("no invocation for " + a.kind.String())
}

// hogLimit is the memory limit of the oom jobs.
const hogLimit = 32 << 20

// echoWat prints its argv[1] and a newline through WASI (argc must be 2).
const echoWat = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (local $arg i32) (local $end i32)
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    (drop (call $args (i32.const 64) (i32.const 1024)))
    ;; argv[1] runs from its pointer to the buffer's end, NUL included:
    ;; write it with the NUL turned into a newline.
    (local.set $arg (i32.load (i32.const 68)))
    (local.set $end (i32.add (i32.const 1024) (i32.load (i32.const 4))))
    (i32.store8 (i32.sub (local.get $end) (i32.const 1)) (i32.const 10))
    (i32.store (i32.const 16) (local.get $arg))
    (i32.store (i32.const 20) (i32.sub (local.get $end) (local.get $arg)))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))))`
