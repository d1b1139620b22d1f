package egress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/wovyr/wovyr/egress"
	"github.com/wovyr/wovyr/egress/egresstest"
	"github.com/wovyr/wovyr/egress/netns"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(egresstest.ProbeEnv); spec != "" {
		os.Exit(egresstest.RunProbe(spec))
	}
	os.Exit(m.Run())
}

// logBuf collects the service's log lines for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("egress tests need root (network namespaces, nftables); CI runs as root")
	}
}

// env is one rig plus one service on it, torn down (and checked for
// leftovers) at the end of the test.
type env struct {
	rig  *egresstest.Rig
	svc  *egress.Service
	cfg  egress.Config
	logs *logBuf
}

func newEnv(t testing.TB, tag string) *env {
	t.Helper()
	requireRoot(t)
	ctx := context.Background()
	rig, err := egresstest.New(ctx, tag)
	if err != nil {
		t.Fatalf("rig: %v", err)
	}
	cfg := rig.Config()
	if err := egress.Reconcile(ctx, cfg, nil); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	logs := &logBuf{}
	svc, err := egress.NewService(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		rig.Close()
		t.Fatalf("service: %v", err)
	}
	e := &env{rig: rig, svc: svc, cfg: cfg, logs: logs}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("service close: %v", err)
		}
		left, err := egress.Find(context.Background(), cfg)
		if err != nil {
			t.Errorf("find leftovers: %v", err)
		}
		if !left.Empty() {
			t.Errorf("leftovers after Close: %+v", left)
		}
		if err := rig.Close(); err != nil {
			t.Errorf("rig close: %v", err)
		}
		for _, n := range []string{rig.HostNetns, rig.UpNetns} {
			if _, err := os.Stat(n); err == nil {
				t.Errorf("rig netns %s left behind", n)
			}
		}
	})
	return e
}

func (e *env) slot(t testing.TB) *egress.Slot {
	t.Helper()
	s, err := e.svc.NewSlot(context.Background())
	if err != nil {
		t.Fatalf("new slot: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("slot close: %v", err)
		}
	})
	return s
}

// probe runs the probe program inside the slot and returns its report.
func (e *env) probe(t testing.TB, s *egress.Slot, spec egresstest.ProbeSpec) egresstest.Report {
	t.Helper()
	spec.DNS = s.Gateway().String() + ":53"
	return e.probeIn(t, s.NetnsPath(), spec)
}

// probeIn runs the probe in the netns at path (positive controls run it on
// the stand-in host, outside every slot).
func (e *env) probeIn(t testing.TB, path string, spec egresstest.ProbeSpec) egresstest.Report {
	t.Helper()
	spec.CA = e.rig.CAPEM
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = []string{egresstest.ProbeEnv + "=" + string(b)}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := netns.Do(path, cmd.Start); err != nil {
		t.Fatalf("start probe in %s: %v", path, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	var rep egresstest.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("probe report: %v\n%s\n%s", err, out.String(), stderr.String())
	}
	return rep
}
