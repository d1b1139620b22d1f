package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binaries builds wovyr and wovyr-guest (as make build does) into a
// directory every uid can read.
func binaries(t *testing.T) (wovyr, guest string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wovyr-soak-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	wovyr, guest = filepath.Join(dir, "wovyr"), filepath.Join(dir, "wovyr-guest")
	builds := []struct {
		out, pkg string
		env      []string
		args     []string
	}{
		{wovyr, "../cmd/wovyr", nil, nil},
		{guest, "../cmd/wovyr-guest", []string{"CGO_ENABLED=0"}, []string{"-trimpath", "-ldflags", "-s -w"}},
	}
	for _, b := range builds {
		cmd := exec.Command("go", append(append([]string{"build"}, b.args...), "-o", b.out, b.pkg)...)
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return wovyr, guest
}

// certCache keeps a certified store and the busybox template between runs:
// certifying container and gVisor takes minutes here, and the soak tests
// the daemon, not the battery. A cached record is used only when the
// daemon's own check (`wovyr backends`) still calls it certified, so a new
// kernel, runtime or configuration certifies afresh.
const certCache = "/var/cache/wovyr-test/soak"

// prepareState fills state with certifications of backends (and the busybox
// template when a backend needs it), from certCache where it still holds.
func prepareState(t *testing.T, wovyr, guest, state string, backends []string) {
	t.Helper()
	// The shared parent as the OCI tests need it (o+x: sandbox uids
	// traverse it), whichever test makes it first; the cache itself 0700.
	if err := os.MkdirAll(filepath.Dir(certCache), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(certCache, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(certCache+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) ([]byte, error) {
		return exec.Command(wovyr, append([]string{"--state-dir", state, "--guest", guest}, args...)...).CombinedOutput()
	}
	copyTree(t, certCache, state)
	needOCI := false
	for _, b := range backends {
		needOCI = needOCI || b == "container" || b == "gvisor"
	}
	if _, err := os.Stat(filepath.Join(state, "images/busybox/digest")); needOCI && err != nil {
		if out, err := cli("image", "build", "busybox"); err != nil {
			t.Fatalf("image build busybox: %v\n%s", err, out)
		}
	}
	out, err := cli("backends", "--json")
	if err != nil {
		t.Fatalf("wovyr backends: %v\n%s", err, out)
	}
	var sts []struct {
		Name      string `json:"name"`
		Certified bool   `json:"certified"`
	}
	if err := json.Unmarshal(out, &sts); err != nil {
		t.Fatalf("wovyr backends --json: %v\n%s", err, out)
	}
	certified := map[string]bool{}
	for _, s := range sts {
		certified[s.Name] = s.Certified
	}
	fresh := false
	for _, b := range backends {
		if certified[b] {
			continue
		}
		t.Logf("certifying %s (no valid cached certification)", b)
		if out, err := cli("certify", "--backend", b); err != nil {
			t.Fatalf("certify %s: %v\n%s", b, err, out)
		}
		fresh = true
	}
	if fresh {
		os.RemoveAll(certCache)
		os.MkdirAll(certCache, 0o700)
		copyTree(t, state, certCache)
	}
}

// copyTree copies the store and the busybox template from src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	for _, p := range []string{"wovyr.db", "images"} {
		if _, err := os.Stat(filepath.Join(src, p)); err != nil {
			continue
		}
		os.MkdirAll(dst, 0o711)
		if out, err := exec.Command("cp", "-a", filepath.Join(src, p), dst+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", p, err, out)
		}
	}
}

// tenantSpec is one tenant of the soak's config.
type tenantSpec struct {
	name   string
	weight int
	token  string
}

// writeConfig writes the daemon's config: the tenants (the first is admin),
// concurrency, and reconcile limited to this daemon's own sandboxes, since
// other test runs share the host.
func writeConfig(t *testing.T, path string, tenants []tenantSpec, concurrency int) {
	t.Helper()
	type tenantJSON struct {
		Name       string   `json:"name"`
		Weight     int      `json:"weight"`
		Admin      bool     `json:"admin,omitempty"`
		Token      []string `json:"token_sha256"`
		MaxPending int      `json:"max_pending"`
		Rate       int      `json:"rate"`
		Burst      int      `json:"burst"`
	}
	var ts []tenantJSON
	for i, tn := range tenants {
		h := sha256.Sum256([]byte(tn.token))
		ts = append(ts, tenantJSON{Name: tn.name, Weight: tn.weight, Admin: i == 0, Token: []string{hex.EncodeToString(h[:])},
			MaxPending: 1000, Rate: 10000, Burst: 10000})
	}
	b, err := json.Marshal(map[string]any{"cgroup_reconcile": "owned", "concurrency": concurrency, "shutdown_grace": "5s", "tenants": ts})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// daemon is one `wovyr serve` process on the soak's state dir.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	log  *syncBuffer
}

// syncBuffer is a bytes.Buffer safe to write from the process's pipes
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon starts wovyr serve and waits until it listens and is ready
// (start-up recovery done).
func startDaemon(ctx context.Context, wovyr, state, conf, tmp string, log *syncBuffer) (*daemon, error) {
	addrFile := filepath.Join(state, "addr")
	os.Remove(addrFile)
	d := &daemon{done: make(chan struct{}), log: log}
	d.cmd = exec.Command(wovyr, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--addr-file", addrFile, "--config", conf)
	// The daemon's own temp files go where the soak can see they are gone.
	d.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	listening := func() bool {
		b, err := os.ReadFile(addrFile)
		d.url = "http://" + strings.TrimSpace(string(b))
		return err == nil && len(bytes.TrimSpace(b)) > 0
	}
	if err := d.await(ctx, "listening", listening); err != nil {
		return nil, err
	}
	if err := d.await(ctx, "ready", func() bool { return ready(ctx, d.url) == nil }); err != nil {
		return nil, err
	}
	return d, nil
}

// await polls cond until it holds, the daemon exits or ctx ends (then the
// daemon is killed).
func (d *daemon) await(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-d.done:
			return fmt.Errorf("wovyr serve exited before %s", what)
		case <-ctx.Done():
			d.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// kill ends the daemon with SIGKILL, as a crash would, and waits for it.
func (d *daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// stop shuts the daemon down gracefully; it reports whether it obeyed
// within limit (it is killed otherwise).
func (d *daemon) stop(limit time.Duration) bool {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return true
	case <-time.After(limit):
		d.kill()
		return false
	}
}

// ready reports whether url's /readyz answers 200.
func ready(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}
