package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// hostState is what the soak's daemon could leave behind on the host.
// Other test runs share the host, so each entry is one the soak can
// attribute to itself (its root dir in a path, a cgroup named after its
// tenants or a sandbox its state dir held); host-wide entries new since
// the start (netns, nft tables, /tmp) are reported beside them.
type hostState struct {
	procs   []string // processes whose cwd, root or command line is under the soak's root, or whose cgroup is ours
	mounts  []string // mount points under the soak's root (nsfs ones included)
	cgroups []string // cgroups below wovyr's prefix that are ours
	files   []string // entries left in the daemon's run-time dirs and its TMPDIR

	netns, nft, tmp []string // host-wide, for the before/after diff
}

// sandboxNames collects, while the soak runs, the names of the sandboxes
// its state dir holds (native workspaces, OCI bundles): their cgroups are
// named the same.
type sandboxNames struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *sandboxNames) watch(ctx context.Context, state string) {
	s.names = map[string]bool{}
	for ctx.Err() == nil {
		s.scan(state)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.scan(state)
}

func (s *sandboxNames) scan(state string) {
	for _, d := range []string{"scratch/native", "run/oci/sb"} {
		ents, _ := os.ReadDir(filepath.Join(state, d))
		s.mu.Lock()
		for _, e := range ents {
			s.names[e.Name()] = true
		}
		s.mu.Unlock()
	}
}

func (s *sandboxNames) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

// snapshot reads the host's state as far as it is the soak's.
func snapshot(root, state, tmp string, tenants []tenantSpec, names *sandboxNames) hostState {
	var h hostState
	ours := func(cg string) bool {
		for _, el := range strings.FieldsFunc(cg, func(r rune) bool { return r == '/' || r == ':' || r == '\n' }) {
			if names.has(el) || slices.ContainsFunc(tenants, func(t tenantSpec) bool { return t.name == el }) {
				return true
			}
		}
		return false
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' || p.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		dir := "/proc/" + p.Name()
		cwd, _ := os.Readlink(dir + "/cwd")
		rt, _ := os.Readlink(dir + "/root")
		cmd, _ := os.ReadFile(dir + "/cmdline")
		cg, _ := os.ReadFile(dir + "/cgroup")
		if strings.HasPrefix(cwd, root) || strings.HasPrefix(rt, root) || strings.Contains(string(cmd), root) || ours(string(cg)) {
			h.procs = append(h.procs, p.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], root) {
			h.mounts = append(h.mounts, f[4])
		}
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/wovyr")
	if _, err := os.Stat("/sys/fs/cgroup/wovyr"); err == nil {
		hier = append(hier, "/sys/fs/cgroup/wovyr")
	}
	for _, top := range hier {
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != top && ours(strings.TrimPrefix(p, top)) {
				h.cgroups = append(h.cgroups, p)
			}
			return nil
		})
	}
	for _, d := range []string{"scratch/native", "run/oci/sb", "wasm/work"} {
		ents, _ := os.ReadDir(filepath.Join(state, d))
		for _, e := range ents {
			h.files = append(h.files, filepath.Join(d, e.Name()))
		}
	}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		h.files = append(h.files, filepath.Join("TMPDIR", e.Name()))
	}
	ns, _ := os.ReadDir("/run/netns")
	for _, e := range ns {
		h.netns = append(h.netns, e.Name())
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "wovyr") {
				h.nft = append(h.nft, l)
			}
		}
	}
	h.tmp, _ = filepath.Glob(filepath.Join(os.TempDir(), "wovyr-*"))
	return h
}

// newSince lists what after holds that before did not.
func newSince(before, after []string) []string {
	var n []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			n = append(n, a)
		}
	}
	return n
}
