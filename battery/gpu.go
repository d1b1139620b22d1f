package battery

import (
	"context"
	"io/fs"
	"os"
	"slices"

	"github.com/wovyr/wovyr/sandbox"
)

// gpuRows are the catalogue's GPU rows (95–97). They apply only where this
// node has a GPU and the backend gives sandboxes GPUs; elsewhere Run
// records them not applicable with the reason. Where they do apply a
// backend needs probes for them, or its certification fails closed.
var gpuRows = []int{95, 96, 97}

// nvidiaCtl is the NVIDIA driver's control node: present iff a GPU driver
// is loaded here.
const nvidiaCtl = "/dev/nvidiactl"

// gpuNotApplicable says why GPU row id does not apply to b on this node,
// or "" when it does (or id is no GPU row).
func gpuNotApplicable(ctx context.Context, id int, b sandbox.Backend) string {
	if !slices.Contains(gpuRows, id) {
		return ""
	}
	if st, err := os.Stat(nvidiaCtl); err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		return "no GPU on this node (no NVIDIA driver): the GPU rows apply only where a GPU exists"
	}
	gp, ok := b.(sandbox.GPUProvider)
	if !ok {
		return b.Name() + " gives sandboxes no GPUs"
	}
	if err := gp.GPUSupport(ctx); err != nil {
		return b.Name() + " gives sandboxes no GPUs here: " + err.Error()
	}
	return ""
}
