package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/sandbox"
)

// TestServeTwoRegions runs two `wovyr serve` processes, each its own state
// dir: eu-1 embeds NATS on a loopback port, us-1 joins it (nats.url). An
// invocation submitted to eu-1 that may run only in us-east runs on us-1
// and either node answers for its record; once us-1 stops, the same
// request is refused with residency-unmet, never run in eu-west.
func TestServeTwoRegions(t *testing.T) {
	wovyr, state, conf, natsPort := twoRegions(t)
	eu := startDaemonConfig(t, wovyr, state("wovyr-eu-test-"), conf("eu-1", "eu-west", fmt.Sprintf(`{"listen": "127.0.0.1:%d"}`, natsPort)))
	us := startDaemonConfig(t, wovyr, state("wovyr-us-test-"), conf("us-1", "us-east", fmt.Sprintf(`{"url": "nats://127.0.0.1:%d"}`, natsPort)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	euc, usc := client.New(eu.url, "acme-token", nil), client.New(us.url, "acme-token", nil)
	inv := func(regions ...string) *sandbox.Invocation {
		return &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/echo", "hi"}},
			Policy: sandbox.Policy{Trust: sandbox.Trusted, Residency: sandbox.Residency{Regions: regions}}}
	}
	// us-1 is live once a dispatch to us-east finds it (registration
	// follows its start-up by a heartbeat).
	var rec *client.Invocation
	var err error
	for {
		rec, err = euc.Submit(ctx, inv("us-east"), 30*time.Second)
		if err == nil || sandbox.ClassOf(err) != sandbox.ResidencyUnmet || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || rec.State != client.StateDone || rec.Region != "us-east" || rec.Node != "us-1" || string(rec.Result.Stdout) != "hi\n" {
		t.Fatalf("dispatched to us-east: %+v %v\n%s", rec, err, eu.log)
	}
	for _, c := range []*client.Client{euc, usc} {
		if got, err := c.Get(ctx, rec.ID, 0); err != nil || got.Node != "us-1" || got.State != client.StateDone {
			t.Fatalf("get: %+v %v", got, err)
		}
	}
	local, err := euc.Submit(ctx, inv(), 30*time.Second)
	if err != nil || local.Region != "eu-west" || local.Node != "eu-1" {
		t.Fatalf("local: %+v %v", local, err)
	}

	// us-1 leaves the registry as it stops: us-east work is refused now,
	// not run in eu-west.
	us.stop(t)
	_, err = euc.Submit(ctx, inv("us-east"), 0)
	var ce *client.Error
	want := "residency-unmet: no live node in the allowed regions [us-east] (live regions: [eu-west]); refused, not placed elsewhere"
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Message != want {
		t.Fatalf("after us-1 stopped: %v, want 409 %s", err, want)
	}
}

// twoRegions builds the binaries and returns them with helpers for a
// two-region pair: state makes a state dir in which native is certified,
// conf a node's config (tenant acme, token acme-token) and natsPort the
// loopback port eu-1's embedded NATS listens on.
func twoRegions(t *testing.T) (wovyr string, state func(prefix string) string, conf func(node, region, nats string) string, natsPort int) {
	wovyr, guest := buildBinaries(t)
	state = func(prefix string) string {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o711)
		t.Cleanup(func() { os.RemoveAll(dir) })
		certifiedOnce.Do(func() { certified, certifiedErr = certifyNative(wovyr, guest) })
		if certifiedErr != nil {
			t.Fatal(certifiedErr)
		}
		if err := os.WriteFile(filepath.Join(dir, "wovyr.db"), certified, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	conf = func(node, region, nats string) string {
		return fmt.Sprintf(`{"cgroup_reconcile": "owned", "region": %q, "node": %q, "nats": %s,
			"residency": {"regions": ["eu-west", "us-east"]},
			"tenants": [{"name": "acme", "token_sha256": [%q]}]}`, region, node, nats, config.HashToken("acme-token"))
	}
	return wovyr, state, conf, freePort(t)
}

// A store in which native is certified, made once for the package's
// cluster tests: a certification takes 27 s, and every node's state dir
// starts from a copy of it.
var (
	certifiedOnce sync.Once
	certified     []byte
	certifiedErr  error
)

func certifyNative(wovyr, guest string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "wovyr-certified-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o711)
	if out, err := exec.Command(wovyr, "--state-dir", dir, "--guest", guest, "certify", "--backend", "native").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("certify: %v\n%s", err, out)
	}
	return os.ReadFile(filepath.Join(dir, "wovyr.db"))
}

// TestServeRefusesABadResidencyPolicy: a policy that does not compile
// stops the daemon at start-up, saying why.
func TestServeRefusesABadResidencyPolicy(t *testing.T) {
	wovyr, _ := buildBinaries(t)
	dir := t.TempDir()
	conf := dir + "/serve.json"
	os.WriteFile(conf, []byte(`{"region": "eu-west", "residency": {"policy": "regions.size()"}, "tenants": []}`), 0o600)
	out, err := exec.Command(wovyr, "--state-dir", dir, "serve", "--listen", "127.0.0.1:0", "--config", conf).CombinedOutput()
	if code := exitCode(err); code == 0 || !strings.Contains(string(out), "wovyr serve: bad-input (residency.policy): the policy must return list(string), not int") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServeNodeKilledMidInvocation: us-1 is SIGKILLed while it runs an
// invocation that eu-1 dispatched to it. Once us-1's registry entry has
// expired, eu-1 answers the invocation lost (node-lost), and still does
// after us-1 restarts (which records it lost too, daemon-restart); an
// invocation that ended before the kill is not taken for lost.
func TestServeNodeKilledMidInvocation(t *testing.T) {
	wovyr, state, conf, natsPort := twoRegions(t)
	usState := state("wovyr-us-test-")
	usConf := conf("us-1", "us-east", fmt.Sprintf(`{"url": "nats://127.0.0.1:%d", "heartbeat": "200ms"}`, natsPort))
	eu := startDaemonConfig(t, wovyr, state("wovyr-eu-test-"), conf("eu-1", "eu-west", fmt.Sprintf(`{"listen": "127.0.0.1:%d", "heartbeat": "200ms"}`, natsPort)))
	us := startDaemonConfig(t, wovyr, usState, usConf)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	euc := client.New(eu.url, "acme-token", nil)
	inv := func(argv ...string) *sandbox.Invocation {
		return &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: argv},
			Policy: sandbox.Policy{Trust: sandbox.Trusted, Residency: sandbox.Residency{Regions: []string{"us-east"}}}}
	}
	var done *client.Invocation
	var err error
	for {
		done, err = euc.Submit(ctx, inv("/bin/true"), 30*time.Second)
		if err == nil || sandbox.ClassOf(err) != sandbox.ResidencyUnmet || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || done.State != client.StateDone || done.Node != "us-1" {
		t.Fatalf("dispatched: %+v %v", done, err)
	}
	secs := fmt.Sprintf("300.%d", time.Now().UnixNano()%1000000)
	pattern := "sleep\x00" + secs + "\x00"
	t.Cleanup(func() {
		for _, pid := range pidsOf(pattern) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	running, err := euc.Submit(ctx, inv("/bin/sleep", secs), 0)
	if err != nil || running.Node != "us-1" {
		t.Fatalf("dispatched sleep: %+v %v", running, err)
	}
	for ctx.Err() == nil {
		if rec, err := euc.Get(ctx, running.ID, 0); err == nil && rec.State == client.StateRunning {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	us.cmd.Process.Signal(syscall.SIGKILL)
	<-us.done

	var rec *client.Invocation
	for ctx.Err() == nil {
		if rec, err = euc.Get(ctx, running.ID, 0); err == nil && rec.State == client.StateLost {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || rec.State != client.StateLost || rec.Result == nil || rec.Result.Class != sandbox.Lost ||
		rec.Result.Error != "node-lost: node us-1 stopped answering while it ran" || rec.Node != "us-1" || rec.Region != "us-east" {
		t.Fatalf("after the kill: %+v %v", rec, err)
	}
	// The one that had ended is not lost: its record waits on its node.
	var ce *client.Error
	if _, err := euc.Get(ctx, done.ID, 0); !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(ce.Message, "ended (done) on node us-1, which is not live now") {
		t.Fatalf("the finished one while us-1 is down: %v", err)
	}

	// us-1 restarts: it records the interrupted one lost itself, and eu-1
	// still answers lost, once and for good.
	us = startDaemonConfig(t, wovyr, usState, usConf)
	usc := client.New(us.url, "acme-token", nil)
	if got, err := usc.Get(ctx, running.ID, 0); err != nil || got.State != client.StateLost || got.Result.Error != "daemon-restart" {
		t.Fatalf("on us-1 after its restart: %+v %v", got, err)
	}
	if got, err := euc.Get(ctx, running.ID, 0); err != nil || got.State != client.StateLost || got.Result.Error != rec.Result.Error {
		t.Fatalf("on eu-1 after us-1's restart: %+v %v", got, err)
	}
	for ctx.Err() == nil {
		if got, err := euc.Get(ctx, done.ID, 0); err == nil {
			if got.State != client.StateDone {
				t.Fatalf("the finished one after us-1's restart: %+v", got)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(pidsOf(pattern)) != 0 {
		t.Fatal("the lost invocation's process survived")
	}
}

// TestServeIdempotentRetry: an idempotent invocation whose node is
// SIGKILLed mid-run runs again, once, on the other node of its region, and
// ends there with its output; any node answers that record.
func TestServeIdempotentRetry(t *testing.T) {
	wovyr, state, conf, natsPort := twoRegions(t)
	beat := `, "heartbeat": "200ms"}`
	eu := startDaemonConfig(t, wovyr, state("wovyr-eu-test-"), conf("eu-1", "eu-west", fmt.Sprintf(`{"listen": "127.0.0.1:%d"`+beat, natsPort)))
	us, usState, usConf := map[string]*daemon{}, map[string]string{}, map[string]string{}
	for _, name := range []string{"us-1", "us-2"} {
		usState[name], usConf[name] = state("wovyr-"+name+"-test-"), conf(name, "us-east", fmt.Sprintf(`{"url": "nats://127.0.0.1:%d"`+beat, natsPort))
		us[name] = startDaemonConfig(t, wovyr, usState[name], usConf[name])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	euc := client.New(eu.url, "acme-token", nil)
	secs := fmt.Sprintf("3.%d", time.Now().UnixNano()%1000000)
	t.Cleanup(func() {
		for _, pid := range pidsOf("sleep\x00" + secs + "\x00") {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	inv := &sandbox.Invocation{Idempotent: true,
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/sh", "-c", "sleep " + secs + "; echo done"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted, Residency: sandbox.Residency{Regions: []string{"us-east"}}}}
	// Both us nodes are live once each has answered a dispatch.
	seen := map[string]bool{}
	for len(seen) < 2 && ctx.Err() == nil {
		probe := &sandbox.Invocation{Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}}, Policy: inv.Policy}
		if rec, err := euc.Submit(ctx, probe, 30*time.Second); err == nil {
			seen[rec.Node] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	first, err := euc.Submit(ctx, inv, 0)
	if err != nil || us[first.Node] == nil {
		t.Fatalf("dispatched: %+v %v", first, err)
	}
	for ctx.Err() == nil {
		if rec, err := euc.Get(ctx, first.ID, 0); err == nil && rec.State == client.StateRunning {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	killed := us[first.Node]
	killed.cmd.Process.Signal(syscall.SIGKILL)
	<-killed.done
	other := map[string]string{"us-1": "us-2", "us-2": "us-1"}[first.Node]

	var rec *client.Invocation
	for ctx.Err() == nil {
		rec, err = euc.Get(ctx, first.ID, 10*time.Second)
		if err == nil && (rec.State == client.StateDone || rec.State == client.StateFailed || rec.State == client.StateLost) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || rec.State != client.StateDone || rec.Node != other || rec.Region != "us-east" || string(rec.Result.Stdout) != "done\n" {
		t.Fatalf("after %s was killed: %+v %v\n%s", first.Node, rec, err, eu.log)
	}
	usc := client.New(us[other].url, "acme-token", nil)
	if got, err := usc.Get(ctx, first.ID, 0); err != nil || got.Node != other || got.State != client.StateDone {
		t.Fatalf("on %s: %+v %v", other, got, err)
	}
	// The killed node's start-up reconciles what its kill left (the first
	// attempt's cgroups and workspace mount); it serves once that is done.
	back := startDaemonConfig(t, wovyr, usState[first.Node], usConf[first.Node])
	if _, err := client.New(back.url, "acme-token", nil).Get(ctx, first.ID, 0); err != nil {
		t.Fatalf("%s after its restart: %v", first.Node, err)
	}
	back.stop(t)
}
