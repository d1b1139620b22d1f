// Package snapshottest holds the checks the backends' snapshot tests share.
package snapshottest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

// AssertPrivate checks a golden's directory: mode 0700, and exactly the
// files named in want (in directory order), each 0600.
func AssertPrivate(t testing.TB, dir string, want ...string) {
	t.Helper()
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("golden directory %s: %v %v", dir, st.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		info, _ := e.Info()
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v", e.Name(), info.Mode())
		}
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != strings.Join(want, " ") {
		t.Errorf("golden files %q, want %q", got, strings.Join(want, " "))
	}
}

// Clone restores a clone of g, destroyed when the test ends.
func Clone(t testing.TB, sn sandbox.Snapshotter, g sandbox.Golden) sandbox.Sandbox {
	t.Helper()
	s, err := sn.Restore(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy(context.Background()) })
	return s
}

// Run runs inv in s and wants it to end OK.
func Run(t testing.TB, s sandbox.Sandbox, inv *sandbox.Invocation) *sandbox.Result {
	t.Helper()
	res, err := s.Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if res.Class != sandbox.OK {
		t.Fatalf("class %q (%s) stderr %q", res.Class, res.Error, res.Stderr)
	}
	return res
}

// SoakClones is how many clones a uniqueness test (BATTERY 87) restores:
// WOVYR_SOAK_CLONES where set (`make soak` sets 100), else def.
func SoakClones(t testing.TB, def int) int {
	t.Helper()
	v := os.Getenv("WOVYR_SOAK_CLONES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("WOVYR_SOAK_CLONES=%q: want a number ≥ 2", v)
	}
	return n
}
