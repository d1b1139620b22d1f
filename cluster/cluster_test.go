package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/client"
	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/internal/nativecert"
	"github.com/wovyr/wovyr/manager"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/server"
	"github.com/wovyr/wovyr/store"
)

// Tenants and their tokens: alice may run anywhere, eve only in eu-west,
// sam only in us-east.
var tokens = map[string]string{"alice": "alice-token", "eve": "eve-token", "sam": "sam-token"}

func nodeConfig(name, region string) config.Config {
	cfg := config.Config{Region: region, Node: name, ShutdownGrace: config.Duration(5 * time.Second),
		Residency: config.Residency{Regions: []string{"eu-west", "us-east"},
			DataClasses: map[string][]string{"pii-eu": {"eu-west"}, "pii-us": {"us-east"}}},
		Pools: []config.Pool{{MinWarm: 0, MaxWarm: 2}},
	}
	for _, n := range []string{"alice", "eve", "sam"} {
		tn := config.Tenant{Name: n, TokenSHA256: []string{config.HashToken(tokens[n])}, Rate: 10000, Burst: 10000}
		switch n {
		case "eve":
			tn.Regions = []string{"eu-west"}
		case "sam":
			tn.Regions = []string{"us-east"}
		}
		cfg.Tenants = append(cfg.Tenants, tn)
	}
	return cfg
}

// testNode is one wovyr node of the test cluster: its own state dir,
// store, embedded NATS server (a route to the others) and HTTP API.
type testNode struct {
	name, region, url string
	natsOpts          cluster.EmbeddedOptions
	nats              *cluster.Embedded
	node              *cluster.Node
	store             *store.Store
	stop              func()
}

// stopNATS stops the node's embedded NATS server (the node runs on,
// reconnecting to the cluster's other servers); startNATS starts it again
// on the same ports and store, and waits until its JetStream has caught
// up: a server stopped before that would leave the streams it lags on
// one current replica of three, below their quorum.
func (n *testNode) stopNATS() { n.nats.Shutdown() }

func (n *testNode) startNATS(t testing.TB) {
	t.Helper()
	ns, err := cluster.StartEmbedded(n.natsOpts)
	if err != nil {
		t.Fatal(err)
	}
	n.nats = ns
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := ns.Current()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jetStreamAt is a JetStream client of the NATS at url, closed with the test.
func jetStreamAt(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (n *testNode) client(tenant string) *client.Client {
	return client.New(n.url, tokens[tenant], http.DefaultClient)
}

func freePorts(t testing.TB, k int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range k {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// startCluster starts three nodes in two regions over a three-server NATS
// cluster on loopback, and waits until each sees all three live.
func startCluster(t testing.TB, replicas int) []*testNode {
	t.Helper()
	specs := []nodeSpec{{name: "eu-1", region: "eu-west"}, {name: "eu-2", region: "eu-west"}, {name: "us-1", region: "us-east"}}
	return startNodes(t, specs, replicas, nodeConfig, cluster.Options{Heartbeat: 400 * time.Millisecond, Capacity: 8})
}

// nodeSpec is a test node: its name, its region, and how many (fake)
// GPUs it has.
type nodeSpec struct {
	name, region string
	gpus         int
	maxPayload   int32 // of its NATS server; 0: the default
	// after, if not nil, is waited for before the node connects to its
	// cluster, and connected, if not nil, closed when it has.
	after, connected chan struct{}
}

// startNodes starts a node per spec over a NATS cluster of as many servers
// on loopback, each node's config made by conf and its cluster options
// from o, and waits until each sees them all live.
func startNodes(t testing.TB, specs []nodeSpec, replicas int, conf func(name, region string) config.Config, o cluster.Options) []*testNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the cluster tests run native sandboxes and need root (CI runs as root)")
	}
	routes := freePorts(t, len(specs))
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := make([]*testNode, len(specs))
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			no := o
			no.Name, no.Region, no.Replicas = sp.name, sp.region, replicas
			eo := cluster.EmbeddedOptions{ClusterListen: fmt.Sprintf("127.0.0.1:%d", routes[i]), ClusterName: "wovyr-test", Routes: routeURLs}
			nodes[i], errs[i] = startNode(t, ctx, conf(sp.name, sp.region), no, sp, eo)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	waitLive(t, ctx, nodes)
	return nodes
}

// waitLive waits until every node sees every node live.
func waitLive(t testing.TB, ctx context.Context, nodes []*testNode) {
	t.Helper()
	for _, n := range nodes {
		for len(n.node.Live()) < len(nodes) {
			if ctx.Err() != nil {
				t.Fatalf("%s sees %d live nodes", n.name, len(n.node.Live()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startNode starts a node whose embedded NATS server joins the others as
// eo says (its NATS cluster, routes and gateways).
func startNode(t testing.TB, ctx context.Context, cfg config.Config, o cluster.Options, sp nodeSpec, eo cluster.EmbeddedOptions) (*testNode, error) {
	name, region := o.Name, o.Region
	dir, err := os.MkdirTemp("", "wovyr-cluster-test-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o711) // sandbox uids traverse it
	t.Cleanup(func() { os.RemoveAll(dir) })
	clientPort := freePorts(t, 1)[0] // fixed, so that a restart keeps it
	eo.Name, eo.Region, eo.Listen = name, region, fmt.Sprintf("127.0.0.1:%d", clientPort)
	eo.StoreDir, eo.MaxPayload = filepath.Join(dir, "nats"), sp.maxPayload
	ns, err := cluster.StartEmbedded(eo)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(dir, time.Second)
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	nb, err := native.New(native.Config{ScratchDir: filepath.Join(dir, "scratch")})
	if err != nil {
		return nil, err
	}
	if err := st.PutCert(nativecert.Certify(t, nb)); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	mgr, err := manager.New(manager.Config{Backends: []sandbox.Backend{nb}, Certs: st, Logger: log})
	if err != nil {
		return nil, err
	}
	o.URL, o.Required, o.Logger = ns.ClientURL(), mgr.Required, log
	if sp.after != nil {
		select {
		case <-sp.after:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cn, err := cluster.Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	if sp.connected != nil {
		close(sp.connected)
	}
	so := server.Options{Config: cfg, Manager: mgr, Store: st, Logger: log, Cluster: cn}
	if sp.gpus > 0 {
		alloc, err := gpu.NewAllocator(ctx, gpu.NewFake(sp.gpus, 16<<30), log)
		if err != nil {
			return nil, err
		}
		if so.Admission, err = server.NewFairGPU(cfg, alloc); err != nil {
			return nil, err
		}
	}
	srv, err := server.New(so)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx, ln) }()
	n := &testNode{name: name, region: region, url: "http://" + ln.Addr().String(), natsOpts: eo, nats: ns, node: cn, store: st}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
			cn.Close()
			st.Close()
			n.nats.Shutdown()
		})
	}
	t.Cleanup(n.stop)
	return n, nil
}

func command() *sandbox.Invocation {
	return &sandbox.Invocation{
		Workload: sandbox.Workload{Kind: sandbox.KindCommand, Argv: []string{"/bin/true"}},
		Policy:   sandbox.Policy{Trust: sandbox.Trusted},
	}
}

// allowedFor is the test's own oracle of the deployment's residency.
func allowedFor(tenant string, req sandbox.Residency) []string {
	set := []string{"eu-west", "us-east"}
	keep := func(in []string) {
		set = slices.DeleteFunc(set, func(r string) bool { return !slices.Contains(in, r) })
	}
	switch tenant {
	case "eve":
		keep([]string{"eu-west"})
	case "sam":
		keep([]string{"us-east"})
	}
	if req.Regions != nil {
		keep(req.Regions)
	}
	switch req.DataClass {
	case "pii-eu":
		keep([]string{"eu-west"})
	case "pii-us":
		keep([]string{"us-east"})
	}
	return set
}

var requests = []sandbox.Residency{
	{},
	{Regions: []string{"eu-west"}},
	{Regions: []string{"us-east"}},
	{Regions: []string{"us-east", "eu-west"}},
	{DataClass: "pii-eu"},
	{DataClass: "pii-us"},
	{DataClass: "pii-us", Regions: []string{"eu-west"}},
}

// placeChecked submits /bin/true for tenant through api under req, and
// checks it against allowedFor: refused with 409 residency-unmet when
// nothing is allowed, else done in an allowed region (the API node's own
// when allowed), on a node of that region, its record read back through
// reader. It returns the region, or "refused".
func placeChecked(ctx context.Context, api *testNode, tenant string, req sandbox.Residency, reader *testNode, regionOf map[string]string) (string, error) {
	inv := command()
	inv.Policy.Residency = req
	allowed := allowedFor(tenant, req)
	rec, err := api.client(tenant).Submit(ctx, inv, 30*time.Second)
	if len(allowed) == 0 {
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != sandbox.ResidencyUnmet {
			return "", fmt.Errorf("%s via %s %+v: got %v, %v; want 409 residency-unmet", tenant, api.name, req, rec, err)
		}
		return "refused", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s via %s %+v: %v", tenant, api.name, req, err)
	}
	if rec.State != client.StateDone {
		return "", fmt.Errorf("%s via %s %+v: not done: %+v", tenant, api.name, req, rec)
	}
	// Read it back through reader: the record as stored where it ran.
	got, err := reader.client(tenant).Get(ctx, rec.ID, 0)
	if err != nil {
		return "", fmt.Errorf("get %s via %s: %v", rec.ID, reader.name, err)
	}
	if !slices.Contains(allowed, got.Region) || regionOf[got.Node] != got.Region || got.Result == nil || got.Result.ExitCode != 0 {
		return "", fmt.Errorf("VIOLATION: %s via %s %+v ran at %s/%s, allowed %v", tenant, api.name, req, got.Region, got.Node, allowed)
	}
	// Preferred: the API node's own region when allowed.
	if slices.Contains(allowed, api.region) && got.Region != api.region {
		return "", fmt.Errorf("%s via %s %+v: ran in %s, not in the API node's allowed region", tenant, api.name, req, got.Region)
	}
	return got.Region, nil
}

// TestClusterResidency is the residency truth table over a live cluster:
// every tenant × request × API node, then 1,000 random placements, each
// checked against its record (read back through a random node), and a
// region that loses its only node refusing rather than moving.
func TestClusterResidency(t *testing.T) {
	nodes := startCluster(t, 3)
	// Alone it takes under a minute; in make test, beside the microVM and
	// OCI suites, it has taken almost five.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), name) }
	regionOf := map[string]string{}
	for _, n := range nodes {
		regionOf[n.name] = n.region
	}
	check := func(api *testNode, tenant string, req sandbox.Residency, reader *testNode) (string, error) {
		return placeChecked(ctx, api, tenant, req, reader, regionOf)
	}

	phase("truth table")
	// The truth table: every tenant × request × API node.
	for _, api := range nodes {
		for _, tenant := range []string{"alice", "eve", "sam"} {
			for _, req := range requests {
				if _, err := check(api, tenant, req, nodes[2]); err != nil {
					t.Error(err)
				}
			}
		}
	}
	if t.Failed() {
		return
	}

	phase("placements")
	// 1,000 random placements, eight at a time.
	const total = 1000
	var (
		mu         sync.Mutex
		violations []error
		counts     = map[string]int{}
		wg         sync.WaitGroup
	)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				// A deterministic spread (i's digits pick each factor).
				api, reader := nodes[i%3], nodes[(i/3)%3]
				tenant := []string{"alice", "eve", "sam"}[(i/9)%3]
				req := requests[(i/27)%len(requests)]
				where, err := check(api, tenant, req, reader)
				mu.Lock()
				if err != nil {
					violations = append(violations, err)
				}
				counts[where]++
				mu.Unlock()
			}
		}()
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d of %d placements wrong, first: %v", len(violations), total, violations[0])
	}
	t.Logf("placements: %v", counts)

	phase("tenant isolation")
	// Tenant isolation across nodes: another tenant's id is 404 there too.
	inv := command()
	inv.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
	rec, err := nodes[0].client("alice").Submit(ctx, inv, 30*time.Second)
	if err != nil || rec.Node != "us-1" {
		t.Fatalf("dispatch to us-east: %+v %v", rec, err)
	}
	var ce *client.Error
	if _, err := nodes[1].client("eve").Get(ctx, rec.ID, 0); !errors.As(err, &ce) || ce.Status != 404 || ce.Message != "not-found (id): no invocation "+rec.ID {
		t.Fatalf("another tenant's id: %v", err)
	}
	if _, err := nodes[1].client("alice").Get(ctx, "nosuchid", 0); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("a missing id: %v", err)
	}

	// A cancel through a node that does not hold the invocation reaches
	// the one that does; for its tenant only, and once.
	long := command()
	long.Workload.Argv = []string{"/bin/sleep", "30"}
	long.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
	run, err := nodes[0].client("alice").Submit(ctx, long, 0)
	if err != nil || run.Node != "us-1" || run.State == client.StateDone {
		t.Fatalf("a long run dispatched to us-east: %+v %v", run, err)
	}
	if _, err := nodes[1].client("eve").Cancel(ctx, run.ID); !errors.As(err, &ce) || ce.Status != 404 || ce.Message != "not-found (id): no invocation "+run.ID {
		t.Fatalf("another tenant's cancel through another node: %v", err)
	}
	start := time.Now()
	cancelled, err := nodes[1].client("alice").Cancel(ctx, run.ID)
	if err != nil || (cancelled.State != client.StateDone && cancelled.State != client.StateFailed) || cancelled.Result == nil || cancelled.Result.Class != sandbox.Killed || time.Since(start) > 20*time.Second {
		t.Fatalf("cancel through another node: %+v %+v %v (after %s)", cancelled, cancelled.Result, err, time.Since(start))
	}
	if _, err := nodes[0].client("alice").Cancel(ctx, run.ID); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("a second cancel: %v, want 409", err)
	}
	if _, err := nodes[1].client("alice").Cancel(ctx, "nosuchid"); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("a missing id's cancel: %v", err)
	}

	phase("events across nodes")
	// Its events through a node that does not hold it: the holder's late
	// reader's sequence, under the same numbers, output included.
	talk := command()
	talk.Workload.Argv = []string{"/bin/sh", "-c", "echo one; sleep 0.3; echo two >&2"}
	talk.Policy.Residency = sandbox.Residency{Regions: []string{"us-east"}}
	tr, err := nodes[0].client("alice").Submit(ctx, talk, 0)
	if err != nil || tr.Node != "us-1" {
		t.Fatalf("a talking run dispatched to us-east: %+v %v", tr, err)
	}
	events := func(n *testNode) ([]string, error) {
		var got []string
		err := n.client("alice").Events(ctx, tr.ID, func(ev client.Event) error {
			got = append(got, fmt.Sprintf("%d %s %s %q", ev.Seq, ev.Type, ev.State, ev.Data))
			return nil
		})
		return got, err
	}
	remote, err := events(nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	local, err := events(nodes[2])
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(remote, "\n")
	if !slices.Equal(remote, local) || !strings.Contains(joined, ` stdout  "one\n"`) || !strings.Contains(joined, ` stderr  "two\n"`) {
		t.Fatalf("events through eu-2:\n%s\nthrough us-1 (the holder):\n%s", strings.Join(remote, "\n"), strings.Join(local, "\n"))
	}
	if err := nodes[1].client("eve").Events(ctx, tr.ID, func(client.Event) error { return nil }); !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("another tenant's events through another node: %v", err)
	}

	phase("a NATS server stopped")
	// One NATS server of three stops: the cluster keeps serving (every
	// stream and bucket has three replicas), eu-2 through another server.
	nodes[1].stopNATS()
	for i, api := range nodes {
		for _, req := range []sandbox.Residency{{Regions: []string{"us-east"}}, {Regions: []string{"eu-west"}}} {
			// While the streams' leaders move, a dispatch may be refused
			// (503) and is retried; a placement is never wrong.
			for {
				_, err := check(api, "alice", req, nodes[(i+1)%3])
				if err == nil {
					break
				}
				if strings.HasPrefix(err.Error(), "VIOLATION") || ctx.Err() != nil {
					t.Fatalf("with eu-2's NATS server stopped: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	nodes[1].startNATS(t)

	phase("us-east lost")
	// us-east loses its only node: us-east work is refused, never moved.
	nodes[2].stop()
	for slices.Contains(nodes[0].node.LiveRegions(), "us-east") {
		if ctx.Err() != nil {
			t.Fatal("us-1 still live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// While the restarted NATS server's streams settle, the registry may
	// take no heartbeat for longer than an entry lives: every node then
	// answers 503 (its view is stale), never the 409 of an empty view.
	var unavailable error
	for {
		_, err = nodes[0].client("sam").Submit(ctx, command(), 0)
		if !errors.As(err, &ce) || ce.Status != 503 || ctx.Err() != nil {
			break
		}
		if unavailable == nil || unavailable.Error() != err.Error() {
			t.Logf("%6.1fs %v", time.Since(began).Seconds(), err)
		}
		unavailable = err
		time.Sleep(100 * time.Millisecond)
	}
	want := "residency-unmet: no live node in the allowed regions [us-east] (live regions: [eu-west]); refused, not placed elsewhere"
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Message != want {
		t.Fatalf("got %v, want 409 %s", err, want)
	}
	if counts["us-east"] == 0 || counts["eu-west"] == 0 {
		t.Fatalf("no placement reached us-east: %v", counts)
	}

	phase("NATS unreachable")
	// NATS unreachable: the node takes no new work (503, Retry-After),
	// not even what it could run itself.
	nodes[0].stopNATS()
	nodes[1].stopNATS()
	for {
		_, err = nodes[0].client("alice").Submit(ctx, command(), 0)
		if errors.As(err, &ce) && ce.Status == 503 || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.As(err, &ce) || ce.Status != 503 || ce.Code != "unavailable" || ce.RetryAfter != 2*time.Second ||
		!strings.HasPrefix(ce.Message, "unavailable: the cluster is unreachable from this node (NATS ") {
		t.Fatalf("with NATS unreachable: %v", err)
	}
}
