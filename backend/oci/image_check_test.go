package oci

import (
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// TestCheckImageAtSubmit: issue #25 item 3 — an image the node lacks must
// be refused as bad input before anything is recorded or prepared, so the
// daemon answers 400 instead of a 200 with a failed record.
func TestCheckImageAtSubmit(t *testing.T) {
	for name, b := range newBackends(t) {
		var ic sandbox.ImageChecker = b
		if err := ic.CheckImage(""); err != nil {
			t.Errorf("%s: default image: %v", name, err)
		}
		if err := ic.CheckImage("busybox"); err != nil {
			t.Errorf("%s: busybox: %v", name, err)
		}
		for _, bad := range []string{"py-not-built", "../etc"} {
			err := ic.CheckImage(bad)
			if sandbox.ClassOf(err) != sandbox.BadInput || sandbox.FieldOf(err) != "workload.image" {
				t.Errorf("%s: image %q: %v, want bad-input on workload.image", name, bad, err)
			}
		}
	}
}
