package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/backend/wasm"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/internal/nativecert"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// Tokens of the test tenants.
const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
	opsToken   = "ops-token"
)

func testConfig() config.Config {
	return config.Config{
		MaxBodyBytes:  64 << 10,
		ShutdownGrace: config.Duration(5 * time.Second),
		Tenants: []config.Tenant{
			{Name: "alice", TokenSHA256: []string{config.HashToken(aliceToken)}},
			{Name: "bob", TokenSHA256: []string{config.HashToken(bobToken)}},
			{Name: "ops", Admin: true, TokenSHA256: []string{config.HashToken(opsToken)}},
		},
	}
}

// harness is a real daemon on a loopback port: the native backend, a bbolt
// store in a fresh state dir, certified by the real battery.
type harness struct {
	t     testing.TB
	dir   string
	url   string
	store *store.Store
	mgr   *manager.Manager
	srv   *server.Server
	stop  func() // graceful shutdown; waits for Run to return
	spec  *spec
}

var (
	wasmOnce    sync.Once
	wasmRec     cert.Record
	wasmCertErr error
)

// certifyWasm runs the wasm battery once per test binary (its record's key
// depends on the backend's configuration only, not on the state dir).
func certifyWasm(t testing.TB, b *wasm.Backend) cert.Record {
	t.Helper()
	wasmOnce.Do(func() { wasmRec, wasmCertErr = battery.Run(context.Background(), wasm.Suite(b), nil) })
	if wasmCertErr != nil || !wasmRec.Passed {
		t.Fatalf("wasm battery: %v %v", wasmCertErr, wasmRec.Failed())
	}
	return wasmRec
}

// certify runs the native battery once per test binary (nativecert).
func certify(t testing.TB, b *native.Backend) cert.Record { return nativecert.Certify(t, b) }

// stateDir is a fresh state dir that sandbox uids can traverse (not
// t.TempDir(), whose parent is 0700).
func stateDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the daemon tests need root (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "wovyr-server-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newHarness(t testing.TB, cfg config.Config, dir string) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, dir, nil)
}

// newHarnessWith is newHarness with more backends beside native and wasm,
// made by extra from the state dir (nil: none).
func newHarnessWith(t testing.TB, cfg config.Config, dir string, extra func(dir string, st *store.Store) []sandbox.Backend) *harness {
	t.Helper()
	h := startHarness(t, cfg, dir, extra, nil)
	h.waitReady()
	return h
}

// newHarnessNoWait is newHarnessWith(testConfig(), "", extra) without
// waiting for /readyz.
func newHarnessNoWait(t testing.TB, extra func(dir string, st *store.Store) []sandbox.Backend) *harness {
	t.Helper()
	return startHarness(t, testConfig(), "", extra, nil)
}

// startHarness starts the daemon; tune, if set, adjusts its options (an
// admission of the test's own) before server.New.
func startHarness(t testing.TB, cfg config.Config, dir string, extra func(dir string, st *store.Store) []sandbox.Backend, tune func(*server.Options)) *harness {
	t.Helper()
	if dir == "" {
		dir = stateDir(t)
	}
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := native.New(native.Config{ScratchDir: filepath.Join(dir, "scratch")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutCert(certify(t, nb)); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := wasm.New(wasm.Config{StateDir: dir, Logger: slog.New(slog.DiscardHandler), Worker: []string{exe}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	if err := st.PutCert(certifyWasm(t, wb)); err != nil {
		t.Fatal(err)
	}
	backends := []sandbox.Backend{nb, wb}
	if extra != nil {
		backends = append(backends, extra(dir, st)...)
	}
	mgr, err := manager.New(manager.Config{Backends: backends, Certs: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Config: cfg, Manager: mgr, Store: st, Logger: log, SessionDir: filepath.Join(dir, "sessions")}
	if tune != nil {
		tune(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	h := &harness{t: t, dir: dir, url: "http://" + ln.Addr().String(), store: st, mgr: mgr, srv: srv, spec: loadSpec(t)}
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			st.Close()
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) waitReady() {
	for i := 0; i < 200; i++ {
		resp, err := http.Get(h.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatal("daemon never became ready")
}

// client returns an API client whose every request and response is checked
// against the OpenAPI document.
func (h *harness) client(token string) *client.Client {
	return client.New(h.url, token, &http.Client{Transport: &validating{t: h.t, spec: h.spec, requests: true}})
}

// raw sends a request as is (it may be deliberately invalid) and checks
// only the response against the OpenAPI document.
func (h *harness) raw(method, path, token string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &validating{t: h.t, spec: h.spec}}).Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// spec is the parsed OpenAPI document and its router.
type spec struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specOnce sync.Once
	theSpec  *spec
	specErr  error
)

func loadSpec(t testing.TB) *spec {
	specOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI)
		if err != nil {
			specErr = err
			return
		}
		r, err := legacyrouter.NewRouter(doc) // validates the document too
		theSpec, specErr = &spec{doc: doc, router: r}, err
	})
	if specErr != nil {
		t.Fatalf("openapi: %v", specErr)
	}
	return theSpec
}

// validating is a RoundTripper that checks traffic against the OpenAPI
// document: every response always, requests when they are meant to be
// valid.
type validating struct {
	t        testing.TB
	spec     *spec
	requests bool
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	route, params, err := v.spec.router.FindRoute(req)
	if err != nil {
		v.t.Errorf("openapi: %s %s is not in the document: %v", req.Method, req.URL.Path, err)
		return http.DefaultTransport.RoundTrip(req)
	}
	in := &openapi3filter.RequestValidationInput{Request: req.Clone(req.Context()), PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if body != nil {
		in.Request.Body = io.NopCloser(bytes.NewReader(body))
	}
	if v.requests {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			v.t.Errorf("openapi: request %s %s: %v", req.Method, req.URL.Path, err)
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	var rb []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A live stream is checked by its status and type only: reading
		// it whole here would deliver every event at its end.
	} else {
		var rerr error
		rb, rerr = io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(rb))
		if rerr != nil {
			return resp, nil
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(rb)), Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		v.t.Errorf("openapi: response %d to %s %s: %v\nbody: %.400s", resp.StatusCode, req.Method, req.URL.Path, err, rb)
	}
	return resp, nil
}
