package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/wovyr/wovyr/idmap"
	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// canaryMount is where devNullAttempt binds the host canary directory.
const canaryMount = "/wovyr-canary"

// devNullAttempt is CVE-2025-31133 attempted on the runtime itself, below
// wovyr's own defences: the runtime gets wovyr's spec for a sandbox but
// with the root's own /dev (no /dev tmpfs, which wovyr's spec always
// mounts) whose null is a symlink to a host canary file bound rw into the
// root. A runtime that follows /dev/null when it masks paths (runc < 1.2.8)
// binds the canary over /proc/timer_list and may point the container's
// stdio at it; a fixed one refuses or masks with the real device. Secure:
// the canary file is unchanged and its marker never shows inside.
//
// It returns what happened and whether the runtime held.
func devNullAttempt(ctx context.Context, b *Backend, d *driver) (string, bool) {
	dir, err := os.MkdirTemp("", "wovyr-canary-")
	if err != nil {
		return err.Error(), false
	}
	defer os.RemoveAll(dir)
	marker := "wovyr-mark-" + sandbox.NewID()[:12]
	file := filepath.Join(dir, "secret")
	// World-writable, so that only the runtime's choice of file protects it.
	if err := os.WriteFile(file, []byte(marker), 0o666); err != nil {
		return err.Error(), false
	}
	if err := os.Chmod(file, 0o666); err != nil {
		return err.Error(), false
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err.Error(), false
	}
	id := newID(b.gvisor)
	bundle := filepath.Join(b.run, "sb", id)
	defer os.RemoveAll(bundle)
	sl, err := acquireSlot(b.cfg.UIDBase, b.cfg.Slots)
	if err != nil {
		return err.Error(), false
	}
	defer sl.release()
	if err := devNullBundle(b, bundle, id, dir, sl.ids); err != nil {
		return "bundle: " + err.Error(), false
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := d.createCommand(bundle, id)
	for i, a := range cmd.Args {
		if a == "create" {
			cmd.Args[i] = "run"
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	release, err := creatingCgroups()
	if err != nil {
		return "cgroups: " + err.Error(), false
	}
	runErr := runBounded(ctx, cmd)
	release()
	_ = d.destroy(context.WithoutCancel(ctx), id)
	_ = removeCgroup(context.WithoutCancel(ctx), poolCgroup(id))
	got, _ := os.ReadFile(file)
	inside := strings.TrimSpace(out.String())
	run := "ran"
	if runErr != nil {
		run = "refused (" + runErr.Error() + ")"
	}
	secure := string(got) == marker && !strings.Contains(inside, marker)
	return fmt.Sprintf("/dev/null -> canary: %s; output %.160q; canary file %.60q", run, inside, got), secure
}

// devNullBundle writes the attempt's bundle: a busybox root whose
// dev/null is a symlink into the bound canary directory.
func devNullBundle(b *Backend, bundle, id, canaryDir string, ids idmap.Range) error {
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", canaryMount[1:]} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(bundle, 0o711); err != nil {
		return err
	}
	bb, err := os.ReadFile(filepath.Join(image.RootFS(b.imagesDir(), "busybox"), "bin", "busybox"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bb, 0o755); err != nil {
		return err
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", "sh")); err != nil {
		return err
	}
	if err := os.Symlink(canaryMount+"/secret", filepath.Join(rootfs, "dev", "null")); err != nil {
		return err
	}
	// The root belongs to the sandbox's root, as an overlay upper does, so
	// the runtime may create its device nodes in /dev.
	if err := filepath.Walk(rootfs, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(ids.HostUID), int(ids.HostGID))
	}); err != nil {
		return err
	}
	s, err := buildSpec(specParams{rootfs: rootfs, agent: b.agent, cgroups: poolCgroup(id), ids: ids,
		limits: sandbox.Limits{}.WithDefaults(), gvisor: b.gvisor})
	if err != nil {
		return err
	}
	var mounts []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination != "/dev" && !strings.HasPrefix(m.Destination, "/dev/") && m.Destination != agentPath {
			mounts = append(mounts, m)
		}
	}
	s.Mounts = append(mounts, specs.Mount{Destination: canaryMount, Type: "bind", Source: canaryDir, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	s.Root.Readonly = false
	s.Process.Args = []string{"/bin/busybox", "sh", "-c", "echo timer_list=$(/bin/busybox head -c 64 /proc/timer_list); echo done"}
	s.Process.Cwd = "/"
	js, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o600)
}
