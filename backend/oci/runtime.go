package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wovyr/wovyr/internal/childproc"
)

// driver runs one OCI runtime binary. The three runtimes share the CLI shape
// (create/start/kill/delete/state with --root); their quirks are fields.
type driver struct {
	name    string   // "crun", "runc" or "runsc"
	path    string   // the binary
	root    string   // its --root state directory, ours alone
	flags   []string // global flags after --root (runsc: platform, network, seccomp)
	hybrid  bool     // crun on a hybrid cgroup host: create must not see cgroup2
	accel   string   // runsc's platform, reported as Capability.Accel
	version string
	// restoreCheck: this runsc validates a restore's spec against the
	// checkpoint's (its restore-spec-validation flag, absent before 2025).
	// A clone's spec differs from its golden's by design — its own uid
	// range, scratch and bind sources (ADR 0020) — so restores turn it off.
	restoreCheck bool
	// nvproxy: this runsc has --nvproxy (GPU access through the Sentry).
	nvproxy bool
}

// restoreCheckFeature is the probe feature that records restoreCheck, so a
// stored probe (Adopt) keeps it without running the binary.
const restoreCheckFeature = "restore-spec-validation"

// newDriver resolves bin (a name or a path) and reads its version.
func newDriver(ctx context.Context, name, bin, stateDir string) (*driver, error) {
	d, err := lookDriver(name, bin, stateDir)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, d.path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", d.path, err)
	}
	d.version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if name == "runsc" {
		flags, err := exec.CommandContext(ctx, d.path, "flags").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s flags: %w", d.path, err)
		}
		d.restoreCheck = strings.Contains(string(flags), "-"+restoreCheckFeature+" ")
		d.nvproxy = nvproxyFlag.Match(flags)
	}
	return d, nil
}

// lookDriver resolves bin without running it: the driver lacks its version.
func lookDriver(name, bin, stateDir string) (*driver, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%s not installed: %w", name, err)
	}
	d := &driver{name: name, path: path, root: filepath.Join(runDir(stateDir), "state", name)}
	if name == "crun" {
		d.hybrid = hybridCgroups()
	}
	return d, nil
}

// hybridCgroups reports a v1 host that also mounts an (empty) cgroup2 tree
// at /sys/fs/cgroup/unified, which makes crun 1.8 fail to create.
func hybridCgroups() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/unified", &st) != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

func (d *driver) argv(args ...string) []string {
	return append(append([]string{"--root", d.root}, d.flags...), args...)
}

// command builds a runtime command. It is not bound to a context: callers
// bound waits themselves so that a cancelled call never leaves a half-made
// container behind without its cleanup running.
func (d *driver) command(args ...string) *exec.Cmd {
	return exec.Command(d.path, d.argv(args...)...)
}

// createCommand builds "create --bundle B ID". On a hybrid host crun runs in
// a private mount namespace where the cgroup2 mount is gone (DESIGN §5);
// exec/kill/delete need no wrapper.
func (d *driver) createCommand(bundle, id string) *exec.Cmd {
	return d.wrapped(d.argv("create", "--bundle", bundle, id))
}

// runDetachedCommand builds "run --detach --bundle B ID": create and start
// in one runtime process (the container keeps the stdio it was given).
func (d *driver) runDetachedCommand(bundle, id string) *exec.Cmd {
	return d.wrapped(d.argv("run", "--detach", "--bundle", bundle, id))
}

func (d *driver) wrapped(args []string) *exec.Cmd {
	if !d.hybrid {
		return exec.Command(d.path, args...)
	}
	sh := `umount /sys/fs/cgroup/unified && exec "$0" "$@"`
	return exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", sh, d.path}, args...)...)
}

// run runs a runtime subcommand to completion, bounded by timeout, and
// returns its combined output in the error.
func (d *driver) run(ctx context.Context, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := d.command(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runBounded(ctx, cmd); err != nil {
		return fmt.Errorf("%s %s: %w: %s", d.name, args[0], err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// runBounded starts cmd and waits for it, killing it if ctx ends first.
func runBounded(ctx context.Context, cmd *exec.Cmd) error {
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	// Pdeathsig follows the thread that forks: childproc holds it.
	child, err := childproc.Start(cmd)
	if err != nil {
		return err
	}
	select {
	case <-child.Done():
		return child.Wait()
	case <-ctx.Done():
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		child.Wait()
		return ctx.Err()
	}
}

// destroy kills and deletes container id, tolerating "does not exist".
func (d *driver) destroy(ctx context.Context, id string) error {
	err := d.run(ctx, 10*time.Second, "delete", "--force", id)
	d.dropStaleLocks(id)
	if err != nil && !d.exists(id) {
		return nil
	}
	return err
}

// dropStaleLocks removes id's lock files once none of its state is left:
// runsc's delete can lose the race to remove its
// "<id>_sandbox:<id>.lock" against another runsc call that held the lock
// (a state query), and a lock guards nothing without its state.
func (d *driver) dropStaleLocks(id string) {
	ents, _ := os.ReadDir(d.root)
	var locks []string
	for _, e := range ents {
		switch n := e.Name(); {
		case !strings.Contains(n, id):
		case strings.HasSuffix(n, ".lock"):
			locks = append(locks, filepath.Join(d.root, n))
		default:
			return // state remains: its lock is in use
		}
	}
	for _, l := range locks {
		_ = os.Remove(l)
	}
}

// exists reports whether the runtime still has state for id.
func (d *driver) exists(id string) bool {
	for _, p := range []string{filepath.Join(d.root, id), filepath.Join(d.root, id+"_sandbox:"+id+".state")} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	ents, _ := os.ReadDir(d.root)
	for _, e := range ents {
		if strings.Contains(e.Name(), id) {
			return true
		}
	}
	return false
}

// list returns the container ids in this driver's root.
func (d *driver) list(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := d.command("list", "--quiet")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := runBounded(ctx, cmd); err != nil {
		if _, serr := os.Stat(d.root); errors.Is(serr, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s list: %w: %s", d.name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.Fields(out.String()), nil
}
