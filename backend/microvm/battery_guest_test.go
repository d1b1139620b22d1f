package microvm

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wovyr/wovyr/backend/oci"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// ociState is the OCI tests' state directory (templates built once).
const ociState = "/var/cache/wovyr-test/oci"

// containerControls is the container suite whose weakened copies run the
// controls of the rows no VM configuration weakens.
func containerControls(t *testing.T) battery.Suite {
	t.Helper()
	e := env.Get(t)
	if _, err := exec.LookPath("crun"); err != nil {
		if _, err := exec.LookPath("runc"); err != nil {
			t.Skip("no OCI runtime (crun or runc) for the container controls")
		}
	}
	agentBin := filepath.Join(t.TempDir(), "wovyr-guest")
	data, err := os.ReadFile(e.Guest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(agentBin), 0o755)
	if !image.Exists(filepath.Join(ociState, "images"), "busybox") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := image.Build(ctx, "busybox", filepath.Join(ociState, "images"), os.Stderr); err != nil {
			t.Fatalf("build the busybox template: %v", err)
		}
	}
	c, err := oci.NewContainer(oci.Config{StateDir: ociState, Agent: agentBin,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if capa := c.Probe(context.Background()); !capa.Available {
		t.Fatalf("container backend: %s", capa.Reason)
	}
	return oci.Suite(c, "busybox")
}

// TestGuestBattery runs contained rows through battery.Run: each passes on
// the microVM with its host side judged, and each control flags — a
// microVM weakness for the limits the host hands the guest (50 and 57
// pids, 54 descriptors), the container's weakened copy for what separate
// kernels give (8 host pids, 45 signals, 30 a kernel-surface attempt,
// which must reach a kernel that is not the host's). The full set runs in
// `wovyr certify --backend microvm`.
func TestGuestBattery(t *testing.T) {
	b := backend(t)
	for _, o := range runRows(t, Suite(b, containerControls(t)), 8, 30, 45, 50, 54, 57) {
		if !strings.Contains(o.Observed, "host: VMM peak") || !strings.Contains(o.Observed, "neighbour answered") {
			t.Errorf("row %d: no host-side verdict in %q", o.ID, o.Observed)
		}
		t.Logf("row %d: %s | control: %s", o.ID, o.Observed, o.ControlObserved)
	}
	if b.bat.nb != nil {
		t.Error("the neighbour VM survives the suite's Teardown")
	}
	assertClean(t, b, "wovyr-vm-")
}

// TestHostWatchFlags is the host watch's own positive control: a process
// of the watched uid that is not a bounded VMM, one that survives
// Destroy, and cgroup bounds that are missing or exceeded are each flagged.
func TestHostWatchFlags(t *testing.T) {
	const uid = 64123 // no VM uses it: the pool starts elsewhere (Config.UIDBase)
	var cmds []*exec.Cmd
	for range 2 {
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	pids := uidProcesses(uid)
	for _, c := range cmds {
		if !slices.Contains(pids, c.Process.Pid) {
			t.Fatalf("uidProcesses(%d) = %v misses %d", uid, pids, c.Process.Pid)
		}
	}
	w := &hostWatch{uid: uid, dir: t.TempDir(), cgroups: map[string]bool{},
		nb: func(context.Context) (time.Duration, error) { return time.Millisecond, nil }}
	stop := w.start(context.Background())
	time.Sleep(3 * watchInterval)
	stop()
	w.afterDestroy()
	got := strings.Join(w.findings, "\n")
	for _, want := range []string{
		"2 host processes ran as the VM's uid 64123 at once",
		"processes of the VM's uid 64123 survive Destroy",
		"the VM's directory " + w.dir + " survives Destroy",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	for _, c := range []struct {
		w    hostWatch
		want string
	}{
		{hostWatch{vmmSeen: 1, memMax: 0, pidsMax: 128, cpuMax: "150000 100000"}, "no memory.max"},
		{hostWatch{vmmSeen: 1, memMax: 1 << 20, peakMem: 2 << 20, pidsMax: 128, cpuMax: "150000 100000"}, "over its memory.max"},
		{hostWatch{vmmSeen: 1, memMax: 64 << 20, availStart: 4 << 30, avail: 1 << 30, pidsMax: 128, cpuMax: "150000 100000"}, "host MemAvailable fell by 3072 MiB"},
		{hostWatch{vmmSeen: 1, memMax: 64 << 20, pidsMax: 0, cpuMax: "150000 100000"}, "no pids.max"},
		{hostWatch{vmmSeen: 1, memMax: 64 << 20, pidsMax: 128, cpuMax: "max 100000"}, "no CPU quota"},
		{hostWatch{}, "was never seen"},
	} {
		c.w.judge()
		if got := strings.Join(c.w.findings, "; "); !strings.Contains(got, c.want) {
			t.Errorf("judge(%+v) = %q, want %q", c.w, got, c.want)
		}
	}
	ok := hostWatch{vmmSeen: 1, memMax: 64 << 20, peakMem: 60 << 20, pidsMax: 128, peakPids: 9, cpuMax: "150000 100000"}
	if ok.judge(); len(ok.findings) > 0 {
		t.Errorf("a bounded VMM was flagged: %v", ok.findings)
	}
}

// TestGuestNoFileLimit: the invocation's descriptor limit holds inside the
// VM (the agent sets it for the job, and restores its own after), where it
// had been the guest's default whatever the invocation asked.
func TestGuestNoFileLimit(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	s, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	in := inv("/bin/sh", "-c", "ulimit -n; ulimit -Hn")
	in.Limits.NoFile = 77
	res, err := s.Run(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "77\n77\n" || res.ExitCode != 0 {
		t.Fatalf("exit %d stdout %q stderr %q, want 77 twice", res.ExitCode, res.Stdout, res.Stderr)
	}
}
