package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLookPathIn resolves inside a root as a process chrooted there would:
// absolute symlinks stay inside, and errors read as the agent's own.
func TestLookPathIn(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"usr/bin", "workspace", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte("#!/usr/bin/elf -e\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "usr/bin/tool"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "usr/bin/elf"), []byte("\x7fELF\x02\x01\x01"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/garbage"), []byte("not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/orphan"), []byte("#!/no/interpreter -x\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/empty"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(root, "usr/bin/plain"), 0o644)
	write(filepath.Join(outside, "escape"), 0o755)
	links := map[string]string{
		"bin":            "/usr/bin",                       // absolute: resolved inside root
		"usr/bin/escape": filepath.Join(outside, "escape"), // exists only outside root
		"usr/bin/dotdot": "../../../../../../../../usr/bin/tool",
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	path := []string{"PATH=/bin"}
	// The sandbox's mounts: a bind of a host file, and an empty tmpfs over
	// a template directory that holds a program.
	agentBin := filepath.Join(outside, "agent")
	if err := os.WriteFile(agentBin, []byte("\x7fELF\x02"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{".wovyr", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, ".wovyr/agent"), 0o644) // the mount point
	write(filepath.Join(root, "tmp/hidden"), 0o755)
	mounts := map[string]string{"/.wovyr/agent": agentBin, "/tmp": "", "/": "ignored"}
	for _, tc := range []struct {
		argv0   string
		env     []string
		want    string
		wantErr string
	}{
		{"tool", path, "/bin/tool", ""},
		{"tool", nil, "/usr/bin/tool", ""}, // defaultPath
		{"dotdot", path, "/bin/dotdot", ""},
		{"plain", path, "", "plain: command not found"},
		{"escape", path, "", "escape: command not found"},
		{"missing", path, "", "missing: command not found"},
		{"/bin/tool", path, "/bin/tool", ""},
		{"../usr/bin/tool", path, "../usr/bin/tool", ""}, // from /workspace
		{"/bin/plain", path, "", "fork/exec /bin/plain: permission denied"},
		{"/etc", path, "", "fork/exec /etc: permission denied"},
		{"/bin/escape", path, "", "fork/exec /bin/escape: no such file or directory"},
		{"./missing", path, "", "fork/exec ./missing: no such file or directory"},
		{"elf", path, "/bin/elf", ""},
		{"garbage", path, "", "fork/exec /bin/garbage: exec format error"},
		{"empty", path, "", "fork/exec /bin/empty: exec format error"},
		{"/bin/orphan", path, "", "fork/exec /bin/orphan: no such file or directory"},
		{"/.wovyr/agent", path, "/.wovyr/agent", ""},
		{"/.wovyr//agent", path, "/.wovyr//agent", ""},
		{"/tmp/hidden", path, "", "fork/exec /tmp/hidden: no such file or directory"},
		{"hidden", []string{"PATH=/tmp:/bin"}, "", "hidden: command not found"},
	} {
		got, err := LookPathIn(root, "/workspace", tc.argv0, tc.env, mounts)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || err != nil && err.Error() != tc.wantErr {
			t.Errorf("LookPathIn(%q, %q) = %q, %v; want %q, %q", tc.argv0, tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}
