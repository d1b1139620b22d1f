package oci

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/image"
)

// TestBaseImage runs the debootstrap template on both runtimes, including
// `ls -l`, which the 2022 runsc breaks on a bookworm root (DESIGN §5).
// Building "base" downloads from the Debian mirror, which tests must not
// do, so it is built once per machine outside the tests:
//
//	wovyr --state-dir /var/cache/wovyr-test/oci image build base
func TestBaseImage(t *testing.T) {
	if !image.Exists(filepath.Join(testState, "images"), "base") {
		t.Skip("base template not cached in " + testState + " (building it needs the network; see the doc comment)")
	}
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", "cat /etc/debian_version; ls -l /usr/bin/env | cut -c1-10; id -u")
			inv.Workload.Image = "base"
			res := run(t, b, inv)
			lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
			if res.ExitCode != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "12") || lines[1] != "-rwxr-xr-x" || lines[2] != "0" {
				t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
}
