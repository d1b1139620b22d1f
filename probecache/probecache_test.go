package probecache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeyFollowsTheFile: every way a binary is replaced or altered changes
// the key; reading it or touching nothing does not.
func TestKeyFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	key := func() string { return NewKey("b").File(bin).Add("cfg").String() }
	k0 := key()
	if _, err := os.ReadFile(bin); err != nil {
		t.Fatal(err)
	}
	if key() != k0 {
		t.Fatal("key changed though the file did not")
	}
	for _, tc := range []struct {
		name   string
		change func() error
	}{
		{"rewritten in place, same size", func() error { return os.WriteFile(bin, []byte("v2"), 0o755) }},
		{"touched", func() error {
			at := time.Now().Add(time.Hour)
			return os.Chtimes(bin, at, at)
		}},
		{"chmod", func() error { return os.Chmod(bin, 0o700) }},
		{"replaced by rename (a package upgrade)", func() error {
			tmp := filepath.Join(dir, "new")
			if err := os.WriteFile(tmp, []byte("v3"), 0o755); err != nil {
				return err
			}
			return os.Rename(tmp, bin)
		}},
		{"removed", func() error { return os.Remove(bin) }},
	} {
		before := key()
		if err := tc.change(); err != nil {
			t.Fatal(err)
		}
		if key() == before {
			t.Errorf("%s: key unchanged", tc.name)
		}
	}
}

func TestKeyParts(t *testing.T) {
	base := NewKey("b").Add("a", 1).String()
	for name, k := range map[string]string{
		"other backend": NewKey("c").Add("a", 1).String(),
		"other value":   NewKey("b").Add("a", 2).String(),
		"split values":  NewKey("b").Add("a").Add(1).String(),
		"more":          NewKey("b").Add("a", 1).Command("no-such-runtime-here").String(),
	} {
		if k == base {
			t.Errorf("%s: same key as the base", name)
		}
	}
	if NewKey("b").Add("a", 1).String() != base {
		t.Error("the same inputs gave another key")
	}
	if NewKey("b").Command("sh").String() == NewKey("b").Command("no-such-runtime-here").String() {
		t.Error("a command that resolves keys like one that does not")
	}
}
