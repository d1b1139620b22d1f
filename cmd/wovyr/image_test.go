package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/wovyr/wovyr/backend/microvm"
	"github.com/wovyr/wovyr/vmimage"
)

// TestImageBuildMicroVMTakesGuestFlag: `wovyr --guest PATH image build
// microvm` puts PATH's agent into the initramfs (it took the binary beside
// wovyr whatever --guest said). The initramfs is an uncompressed cpio, so
// the agent's bytes, marked with a trailer no other build has, appear in it
// as they are.
func TestImageBuildMicroVMTakesGuestFlag(t *testing.T) {
	if _, _, err := vmimage.FindKernel("/boot", "/lib/modules"); err != nil {
		t.Skipf("no guest kernel on this node: %v", err)
	}
	guest, err := os.ReadFile(filepath.Join(filepath.Dir(wovyrBin), "wovyr-guest"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	marked := append(guest, []byte("\x00wovyr-test-guest-"+filepath.Base(dir))...)
	other := filepath.Join(dir, "other-guest")
	if err := os.WriteFile(other, marked, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if o := wovyr(t, "", "--state-dir", state, "--guest", other, "image", "build", "microvm"); o.code != 0 {
		t.Fatalf("image build microvm: exit %d: %s", o.code, o.stderr)
	}
	initramfs, err := os.ReadFile(filepath.Join(microvm.ImageDir(state), vmimage.InitramfsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(initramfs, marked) {
		t.Fatalf("the initramfs does not hold the --guest binary (%d bytes)", len(marked))
	}
}

// TestImageWarmup: `wovyr image warmup` prints, sets and clears a
// template's warm-up; a missing template or a bad command is bad input
// that changes nothing.
func TestImageWarmup(t *testing.T) {
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "images", "py", "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"py"}, 0, "", ""},
		{[]string{"py", "--", "python3", "-c", "import json"}, 0, "", ""},
		{[]string{"py"}, 0, "[\"python3\" \"-c\" \"import json\"]\n", ""},
		{[]string{"nope", "--", "true"}, exitBadInput, "", "wovyr image: image: no such template: nope\n"},
		{[]string{"py", "--", ""}, exitBadInput, "", "wovyr image: image: bad warm-up command: empty argv\n"},
		{[]string{"py"}, 0, "[\"python3\" \"-c\" \"import json\"]\n", ""},
		{[]string{"py", "--"}, 0, "", ""},
		{[]string{"py"}, 0, "", ""},
	}
	for _, s := range steps {
		o := wovyr(t, "", append([]string{"--state-dir", state, "image", "warmup"}, s.args...)...)
		if o.code != s.code || o.stdout != s.stdout || o.stderr != s.errs {
			t.Fatalf("image warmup %q: exit %d stdout %q stderr %q; want %d %q %q", s.args, o.code, o.stdout, o.stderr, s.code, s.stdout, s.errs)
		}
	}
}

// TestImageBuildAptRefusals: bad `image build --from/--apt` and `image
// pull` command lines are bad input (exit 120) that say why and create
// nothing.
func TestImageBuildAptRefusals(t *testing.T) {
	state := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"build", "t", "--from", "busybox", "--apt", "jq"}, "wovyr image: build flags: --from \"busybox\": only base (Debian bookworm minbase) takes --apt packages\n"},
		{[]string{"build", "t", "--from", "base", "--apt", "jq,x;rm"}, "wovyr image: image: bad package list: \"x;rm\" is not a Debian package name\n"},
		{[]string{"build", "t", "--from", "base", "extra"}, "wovyr image: build flags: unexpected \"extra\" (want --from base --apt PKG,...)\n"},
		{[]string{"pull", "Not A Ref", "t"}, "wovyr image: image: bad reference \"Not A Ref\": could not parse reference: Not A Ref (want [REGISTRY/]REPOSITORY[:TAG|@sha256:DIGEST])\n"},
	} {
		o := wovyr(t, "", append([]string{"--state-dir", state, "image"}, c.args...)...)
		if o.code != exitBadInput || o.stderr != c.want {
			t.Errorf("image %q: exit %d, stderr %q; want %d, %q", c.args, o.code, o.stderr, exitBadInput, c.want)
		}
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("refused commands created %d entries in the state dir", len(ents))
	}
}
