package battery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/wovyr/wovyr/battery/prober"
	"github.com/wovyr/wovyr/sandbox"
)

// TestGPURowsNotApplicableWithoutGPU: on a node without a GPU the GPU rows
// are recorded not applicable with the reason, not failed for want of a
// probe, so certification is unaffected; on a GPU node the test skips.
func TestGPURowsNotApplicableWithoutGPU(t *testing.T) {
	if _, err := os.Stat(nvidiaCtl); err == nil {
		t.Skip("this node has an NVIDIA driver")
	}
	s := suite()
	for _, id := range gpuRows {
		delete(s.NotApplicable, id) // no reason given by the suite
	}
	rec, err := Run(context.Background(), s, nil)
	if err != nil || !rec.Passed {
		t.Fatalf("passed=%v err=%v failed=%v", rec.Passed, err, rec.Failed())
	}
	got := map[int]string{}
	for _, o := range rec.Outcomes {
		if !o.Applies {
			got[o.ID] = o.Why
		}
	}
	const why = "no GPU on this node (no NVIDIA driver): the GPU rows apply only where a GPU exists"
	if got[95] != why {
		t.Fatalf("row 95 on native: %q, want %q", got[95], why)
	}
	if _, ok := got[96]; ok {
		t.Fatal("row 96 (C,G) recorded for native")
	}
}

func gpuDev(uuid string, minor int64) sandbox.GPUDevice {
	return sandbox.GPUDevice{UUID: uuid, Nodes: []sandbox.DeviceNode{
		{Path: fmt.Sprintf("/dev/nvidia%d", minor), Major: 195, Minor: minor},
		{Path: "/dev/nvidiactl", Major: 195, Minor: 255},
		{Path: "/dev/nvidia-uvm", Major: 510, Minor: 0},
	}}
}

// TestJudgeGPUAssignedOnly: row 95 holds only when exactly the assigned
// nodes are visible and open and the forged node does not; each way of
// seeing more fails it.
func TestJudgeGPUAssignedOnly(t *testing.T) {
	a := []sandbox.GPUDevice{gpuDev("GPU-a", 0)}
	own := "/dev/nvidia-uvm,/dev/nvidia0,/dev/nvidiactl"
	for _, c := range []struct {
		visible, openable, forged string
		secure                    bool
	}{
		{own, own, "mknod: EPERM", true},
		{own, own, "open: EACCES", true},
		{own + ",/dev/nvidia1", own, "mknod: EPERM", false},                                      // another device visible
		{own, "/dev/nvidia-uvm,/dev/nvidia0,/dev/nvidia1,/dev/nvidiactl", "mknod: EPERM", false}, // another opens
		{own, own, "opened", false},                                                              // the forged node opens
		{own, "/dev/nvidia-uvm,/dev/nvidiactl", "mknod: EPERM", false},                           // its own device unusable
		{own, own, "", false},                                                                    // no forgery tried: proves nothing
	} {
		rep := prober.Report{Data: map[string]string{"visible": c.visible, "openable": c.openable, "forged": c.forged}}
		if got, obs := judgeAssignedOnly(a, rep); got != c.secure {
			t.Errorf("%+v: secure=%v (%s)", c, got, obs)
		}
	}
}

// TestJudgeGPUEnvOverride: row 97 holds only when the nodes are the
// assigned ones and both selection variables name exactly their UUIDs.
func TestJudgeGPUEnvOverride(t *testing.T) {
	a := []sandbox.GPUDevice{gpuDev("GPU-a", 0)}
	own := "/dev/nvidia-uvm,/dev/nvidia0,/dev/nvidiactl"
	for _, c := range []struct {
		visible, nvidia, cuda string
		secure                bool
	}{
		{own, "GPU-a", "GPU-a", true},
		{own, "all", "GPU-a", false},
		{own, "GPU-a", "all", false},
		{own + ",/dev/nvidia1", "GPU-a", "GPU-a", false},
	} {
		rep := prober.Report{Data: map[string]string{"visible": c.visible, "nvidia": c.nvidia, "cuda": c.cuda}}
		if got, obs := judgeEnvOverride(a, rep); got != c.secure {
			t.Errorf("%+v: secure=%v (%s)", c, got, obs)
		}
	}
}

// TestForgeTarget: the forged node names another device where there is
// one, else the first minor of the assigned GPU's major it does not hold.
func TestForgeTarget(t *testing.T) {
	a, b := gpuDev("GPU-a", 0), gpuDev("GPU-b", 1)
	if got := forgeTarget([]sandbox.GPUDevice{a}, []sandbox.GPUDevice{a, b}); got != b.Nodes[0] {
		t.Errorf("two GPUs: forged %+v, want %+v", got, b.Nodes[0])
	}
	if got, want := forgeTarget([]sandbox.GPUDevice{a}, []sandbox.GPUDevice{a}), (sandbox.DeviceNode{Path: "/dev/nvidia1", Major: 195, Minor: 1}); got != want {
		t.Errorf("one GPU: forged %+v, want %+v", got, want)
	}
}

// TestGPUHolders: the residue probe's host scan finds a process holding a
// character device by its numbers (this test holding /dev/null, 1:3), and
// only the holders that were not there before count.
func TestGPUHolders(t *testing.T) {
	null := []sandbox.DeviceNode{{Path: "/dev/null", Major: 1, Minor: 3}}
	before := holders(null)
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !holders(null)[os.Getpid()] {
		t.Fatal("the scan did not find this process holding /dev/null")
	}
	delete(before, os.Getpid())
	if got := newHolders(before, holders(null)); !slices.Contains(got, os.Getpid()) {
		t.Fatalf("new holders %v lack this process", got)
	}
	if got := newHolders(map[int]bool{1: true, 7: true}, map[int]bool{1: true, 7: true}); len(got) != 0 {
		t.Fatalf("no new holders: %v", got)
	}
}
