package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wovyr/wovyr/gpu"
	"github.com/wovyr/wovyr/sandbox"
	"github.com/wovyr/wovyr/sched"
)

// scrubTimeout bounds the scrub of one finished invocation's devices; a
// device whose scrub does not finish in time is quarantined.
const scrubTimeout = 30 * time.Second

// fairGPU is Fair's GPU half: the allocator the scheduler places on (its
// Placer), and the queue wait of GPU invocations. A nil *fairGPU is a node
// without GPUs; its methods then do nothing.
type fairGPU struct {
	alloc *gpu.Allocator
	wait  prometheus.Histogram
}

func newFairGPU(alloc *gpu.Allocator) *fairGPU {
	if alloc == nil {
		return nil
	}
	return &fairGPU{alloc: alloc, wait: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wovyr_gpu_queue_wait_seconds",
		Help:    "Queue wait of invocations that asked for GPUs, from admission to device assignment.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})}
}

// want registers t's device request with the allocator before Submit.
func (g *fairGPU) want(t Ticket) error {
	if g == nil || t.Resources.GPU == 0 {
		return nil
	}
	r := t.GPU
	r.Count = t.Resources.GPU
	return g.alloc.Want(t.ID, t.Tenant, r)
}

// forget drops a request that never got devices.
func (g *fairGPU) forget(t Ticket) {
	if g != nil {
		g.alloc.Forget(t.ID)
	}
}

// started notes a GPU start's queue wait.
func (g *fairGPU) started(st sched.Start) {
	if g != nil && st.Task.Demand.GPU > 0 {
		g.wait.Observe(st.Wait.Seconds())
	}
}

// release scrubs t's devices and frees those verified clean (the
// allocator logs and counts the ones it quarantines).
func (g *fairGPU) release(t Ticket) {
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrubTimeout)
	defer cancel()
	_ = g.alloc.Release(ctx, t.ID)
}

// GPUs is the allocator of this Fair's node, nil without GPUs.
func (f *Fair) GPUs() *gpu.Allocator {
	if f.gpu == nil {
		return nil
	}
	return f.gpu.alloc
}

// gpus is the daemon's allocator, nil without GPUs (or without the fair
// scheduler, the only admission that places devices).
func (s *Server) gpus() *gpu.Allocator {
	if f, ok := s.adm.(*Fair); ok {
		return f.GPUs()
	}
	return nil
}

// selectFor is submit's backend selection. A GPU request is checked first
// (bad input: 400; a node without GPUs: floor-unmet, 409), then the
// manager picks a backend that can give devices at the invocation's floor.
func (s *Server) selectFor(ctx context.Context, inv *sandbox.Invocation) (sandbox.Backend, gpu.Request, error) {
	req := gpu.RequestFor(inv.Resources)
	if err := req.Validate(); err != nil {
		return nil, req, err
	}
	if req.Count > 0 && s.gpus() == nil {
		return nil, req, sandbox.Errorf(sandbox.FloorUnmet, "resources.gpu", "this node has no GPUs")
	}
	b, err := s.mgr.SelectFor(ctx, inv.Policy, inv.Workload.Kind, req.Count)
	return b, req, err
}

// assignGPUs gives a started invocation the devices the scheduler placed
// it on (nothing without a GPU request).
func (s *Server) assignGPUs(inv *sandbox.Invocation) {
	if a := s.gpus(); a != nil && inv.Resources.GPU > 0 {
		inv.GPUs = a.Devices(inv.ID)
	}
}

// gpuCollector exports the devices' assignment and quarantine.
type gpuCollector struct {
	alloc                  *gpu.Allocator
	inUse, quarantined, qn *prometheus.Desc
}

func newGPUCollector(alloc *gpu.Allocator) *gpuCollector {
	return &gpuCollector{alloc: alloc,
		inUse:       prometheus.NewDesc("wovyr_gpu_in_use", "1 for each GPU device (or MIG instance) held by a tenant's invocation, scrubbing included.", []string{"device", "tenant"}, nil),
		quarantined: prometheus.NewDesc("wovyr_gpu_quarantined", "1 for each GPU device out of service: not verified clean, or unhealthy.", []string{"device"}, nil),
		qn:          prometheus.NewDesc("wovyr_gpu_quarantines_total", "Times each GPU device was quarantined.", []string{"device"}, nil),
	}
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inUse
	ch <- c.quarantined
	ch <- c.qn
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	for _, a := range c.alloc.Snapshot() {
		if a.Tenant != "" {
			ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, 1, a.Device.UUID, a.Tenant)
		}
		q := 0.0
		if a.State == gpu.Quarantined {
			q = 1
		}
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, q, a.Device.UUID)
		ch <- prometheus.MustNewConstMetric(c.qn, prometheus.CounterValue, float64(a.Quarantines), a.Device.UUID)
	}
}

// gpuCollectors are the GPU metrics of a Fair, none without GPUs.
func (f *Fair) gpuCollectors() []prometheus.Collector {
	if f.gpu == nil {
		return nil
	}
	return []prometheus.Collector{f.gpu.wait, newGPUCollector(f.gpu.alloc)}
}
