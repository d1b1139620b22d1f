package main

import "testing"

// TestContainerRuntimeFlag: the container backend's runtime is chosen by
// --container-runtime (default auto), and anything but a crun or runc is
// refused before a node is built.
func TestContainerRuntimeFlag(t *testing.T) {
	t.Setenv("WOVYR_CONTAINER_RUNTIME", "")
	for _, c := range []struct {
		args []string
		want string // "" = refused
	}{
		{[]string{"run"}, "auto"},
		{[]string{"--container-runtime", "runc", "certify"}, "runc"},
		{[]string{"--container-runtime=crun", "certify"}, "crun"},
		{[]string{"--container-runtime", "/usr/sbin/runc", "certify"}, "/usr/sbin/runc"},
		{[]string{"--container-runtime", "runsc", "certify"}, ""},
		{[]string{"--container-runtime", "/bin/sh", "certify"}, ""},
	} {
		g, _, err := parseGlobals(c.args)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%q: accepted runtime %q", c.args, g.containerRuntime)
		case c.want != "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want != "" && g.containerRuntime != c.want:
			t.Errorf("%q: runtime %q, want %q", c.args, g.containerRuntime, c.want)
		}
	}
	t.Setenv("WOVYR_CONTAINER_RUNTIME", "runc")
	if g, _, err := parseGlobals([]string{"certify"}); err != nil || g.containerRuntime != "runc" {
		t.Errorf("from the environment: %+v %v", g, err)
	}
}
