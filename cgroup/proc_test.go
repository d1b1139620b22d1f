package cgroup

import "testing"

func TestPathIn(t *testing.T) {
	v1 := "12:pids:/wovyr/a\n4:cpu,cpuacct:/wovyr/b\n1:name=systemd:/init.scope\n0::/\n"
	v2 := "0::/wovyr/c\n"
	for _, tc := range []struct{ text, ctl, want string }{
		{v1, "pids", "/wovyr/a"},
		{v1, "cpuacct", "/wovyr/b"},
		{v1, "memory", "/"}, // no v1 line: the unified one
		{v2, "memory", "/wovyr/c"},
		{"", "pids", ""},
	} {
		if got := PathIn(tc.text, tc.ctl); got != tc.want {
			t.Errorf("PathIn(%q, %s) = %q, want %q", tc.text, tc.ctl, got, tc.want)
		}
	}
}
