package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/wovyr/wovyr/cluster"
	"github.com/wovyr/wovyr/config"
	"github.com/wovyr/wovyr/pool"
	"github.com/wovyr/wovyr/residency"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/store"
)

// Cluster is what the server needs of the node's cluster (package
// cluster): which regions have a live node, dispatch into one of them, and
// the records other nodes hold.
type Cluster interface {
	// Reachable is nil while the cluster can be reached; else the typed
	// error (unavailable: 503) that refuses new work meanwhile.
	Reachable() error
	// LiveRegions are the regions with at least one live node now.
	LiveRegions() []string
	// Peers is how many live nodes region has now.
	Peers(region string) int
	// Freed tells the cluster this node ended an invocation: it may pull
	// the next from its region's queue.
	Freed()
	// Dispatch hands inv (validated, with its tenant and id) to a node of
	// region and returns its record once that node has recorded it
	// durably, waiting up to wait for it to end. A typed refusal of that
	// node (floor-unmet, rate-limited, …) is returned as it is.
	Dispatch(ctx context.Context, region string, inv *sandbox.Invocation, wait time.Duration) (store.Invocation, error)
	// Get returns the tenant's record id from the node that holds it,
	// waiting up to wait for it to end; store.ErrNotFound if no node
	// holds it for that tenant.
	Get(ctx context.Context, tenant, id string, wait time.Duration) (store.Invocation, error)
	// Follow returns the tenant's record id from the node that holds it
	// with its live chunks past the first have, waiting up to wait for a
	// change from state and have; store.ErrNotFound if no node holds it
	// for that tenant.
	Follow(ctx context.Context, tenant, id string, state store.State, have int, wait time.Duration) (store.Invocation, []sandbox.Chunk, error)
	// Placed tells the cluster that this node holds inv's record, created
	// then (a local submit), so that the other nodes can answer GET for it
	// (and retry it, if it is idempotent and this node is lost).
	Placed(ctx context.Context, inv *sandbox.Invocation, created time.Time) error
	// Cancel cancels the tenant's record id on the node that holds it and
	// returns its ended record; store.ErrNotFound if no node holds it for
	// that tenant, that node's Conflict if it had already ended.
	Cancel(ctx context.Context, tenant, id string) (store.Invocation, error)
	// Ended tells the cluster that the record id this node holds ended
	// in st: a node that dies afterwards did not lose it.
	Ended(ctx context.Context, id string, st store.State) error
	// Serve registers this node and takes its region's work through ex
	// until ctx ends. Run calls it once the node is ready.
	Serve(ctx context.Context, ex cluster.Executor) error
}

// Certified lists the backends available and certified on this node: what
// it offers its cluster.
func (s *Server) Certified(ctx context.Context) []cluster.Backend {
	var out []cluster.Backend
	for _, st := range s.mgr.Detect(ctx, false) {
		b, ok := s.mgr.Backend(st.Name)
		if ok && st.Capability.Available && st.Certified {
			out = append(out, cluster.Backend{Name: b.Name(), Strength: b.Strength(), Kinds: b.Kinds()})
		}
	}
	return out
}

// shared reports whether this node's records are the cluster's to find:
// a node with a region in a cluster. A node without one (the default
// single node, whose embedded NATS nobody else joins) keeps them to
// itself and pays no NATS write per invocation.
func (s *Server) shared() bool { return s.cluster != nil && s.cfg.Region != "" }

// newResidency compiles the config's residency policy: once, at start-up,
// so that a policy that does not compile stops the daemon before it serves.
func newResidency(cfg config.Config) (*residency.Policy, error) {
	return residency.New(residency.Options{Regions: cfg.Residency.Regions, Policy: cfg.Residency.Policy, DataClasses: cfg.Residency.DataClasses})
}

// keyFor is the key of the pool for tmpl on b on this node: its region's.
func (s *Server) keyFor(b sandbox.Backend, tmpl sandbox.Template) pool.Key {
	k := pool.KeyFor(b.Name(), tmpl)
	k.Region = s.cfg.Region
	return k
}

// place decides where inv runs: "" for this node, else the region to
// dispatch it to. A node with a region evaluates every invocation's
// residency (the tenant's policy may exclude its own region); a node
// without one only those that ask for a region, which it then cannot
// satisfy alone. The node's own region is preferred when it is allowed.
func (s *Server) place(t *tenant, inv *sandbox.Invocation) (string, error) {
	if s.cfg.Region == "" && inv.Policy.Residency.IsZero() {
		return "", nil
	}
	allowed, err := s.allowed(t, inv.Policy.Residency)
	if err != nil {
		return "", err
	}
	if slices.Contains(allowed, s.cfg.Region) {
		if s.sharesRegion(inv) {
			return s.cfg.Region, nil // the region's queue: fair across its nodes
		}
		return "", nil
	}
	live := []string{}
	if s.cluster != nil {
		live = s.cluster.LiveRegions()
	} else if s.cfg.Region != "" {
		live = []string{s.cfg.Region}
	}
	region, err := residency.Place(allowed, live, s.cfg.Region)
	if err != nil {
		s.log.Info("residency refused", "id", inv.ID, "tenant", t.cfg.Name, "allowed", allowed, "live", live, "error", err.Error())
		return "", err
	}
	return region, nil
}

// sharesRegion reports whether inv, allowed in this node's region, goes
// through the region's queue rather than straight to this node: when the
// region has other live nodes, so that the tenants' weights hold across
// them, whichever node each tenant submits to. GPU work stays on the node
// that accepts it: its devices are that node's to schedule.
func (s *Server) sharesRegion(inv *sandbox.Invocation) bool {
	return s.shared() && inv.Resources.GPU == 0 && s.cluster.Peers(s.cfg.Region) > 1
}

// Room is how many more invocations this node takes from its region's
// queue now (cluster.Executor): it holds up to twice its concurrency,
// running or next in line, so a slot that frees starts the next at once
// while the rest waits in the queue for whichever node frees first.
func (s *Server) Room() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 2*max(s.cfg.Concurrency, 1) - len(s.jobs)
}

// GPUs are this node's GPU devices for its registry entry
// (cluster.Executor); none without an allocator.
func (s *Server) GPUs() []cluster.GPU {
	a := s.gpus()
	if a == nil {
		return nil
	}
	var out []cluster.GPU
	for _, as := range a.Snapshot() {
		out = append(out, cluster.GPU{MIGProfile: as.Device.MIGProfile, MemoryBytes: as.Device.MemoryBytes})
	}
	return out
}

// Weights are this node's tenants and their weights (cluster.Executor).
func (s *Server) Weights() map[string]int {
	out := make(map[string]int, len(s.tenants))
	for _, t := range s.tenants {
		out[t.cfg.Name] = max(t.cfg.Weight, 1)
	}
	return out
}

// placeHere refuses what may not run on this node: a session lives on
// the node that created it, so one whose residency excludes this node's
// region is refused here, never run here.
func (s *Server) placeHere(t *tenant, req sandbox.Residency) error {
	if s.cfg.Region == "" && req.IsZero() {
		return nil
	}
	allowed, err := s.allowed(t, req)
	if err != nil {
		return err
	}
	if !slices.Contains(allowed, s.cfg.Region) {
		return &residency.UnmetError{Placing: true, Allowed: allowed, Live: []string{s.cfg.Region}}
	}
	return nil
}

func (s *Server) allowed(t *tenant, req sandbox.Residency) ([]string, error) {
	return s.res.Allowed(residency.Tenant{Name: t.cfg.Name, Regions: t.cfg.Regions, Attributes: t.cfg.Attributes}, req)
}

// dispatch is submit for an invocation placed in another region: the
// cluster hands it to a node there and answers with that node's record.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, inv *sandbox.Invocation, region string, wait time.Duration) {
	if s.closing.Load() {
		s.writeError(w, sandbox.Errorf(Unavailable, "", "the daemon is shutting down"))
		return
	}
	rec, err := s.cluster.Dispatch(r.Context(), region, inv, wait)
	if err != nil {
		s.writeError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/invocations/"+inv.ID)
	status := http.StatusAccepted
	if rec.State.Terminal() {
		status = http.StatusOK
	}
	writeJSON(w, status, wire(rec))
}

// getRemote answers GET for a record this node does not hold: the node
// that does answers through the cluster, for the same tenant only.
func (s *Server) getRemote(w http.ResponseWriter, r *http.Request, t *tenant, id string, wait time.Duration) {
	rec, err := s.cluster.Get(r.Context(), t.cfg.Name, id, wait)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = notFound(id, store.ErrNotFound)
		}
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire(rec))
}

// Accept is a dispatched invocation's arrival from the cluster: it takes
// the same path as one submitted here (tenant's admission, selection,
// the durable queued record) and returns that record. inv carries its
// tenant and id; it is validated again, as nothing from the wire is
// trusted, and its residency is checked again against this node's region.
func (s *Server) Accept(ctx context.Context, inv *sandbox.Invocation) (store.Invocation, error) {
	t := s.tenantNamed(inv.Tenant)
	if t == nil {
		return store.Invocation{}, sandbox.Errorf(sandbox.BadInput, "tenant", "tenant %q is not known to this node", inv.Tenant)
	}
	if err := inv.Validate(); err != nil {
		return store.Invocation{}, err
	}
	if err := s.placeHere(t, inv.Policy.Residency); err != nil {
		return store.Invocation{}, err
	}
	if _, err := s.submit(ctx, t, inv, time.Now(), false); err != nil {
		return store.Invocation{}, err
	}
	return s.store.Get(inv.ID)
}

// Record is the tenant's record id on this node, waiting up to wait for it
// to end; store.ErrNotFound for another tenant's, as for a missing one.
func (s *Server) Record(ctx context.Context, tenant, id string, wait time.Duration) (store.Invocation, error) {
	rec, err := s.store.Get(id)
	if err != nil {
		return rec, err
	}
	if rec.Tenant != tenant {
		return store.Invocation{}, store.ErrNotFound
	}
	return s.waitDone(ctx, id, min(wait, s.cfg.MaxWait.D()))
}

func (s *Server) tenantNamed(name string) *tenant {
	for _, t := range s.tenants {
		if t.cfg.Name == name {
			return t
		}
	}
	return nil
}
