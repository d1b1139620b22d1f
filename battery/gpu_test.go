package battery

import (
	"context"
	"os"
	"testing"
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
