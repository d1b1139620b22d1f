package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotFound is returned by Find when no valid golden exists for a key.
var ErrNotFound = errors.New("snapshot: no golden snapshot for this key")

// Store keeps golden snapshots in Dir/<backend>/<Key.ID>/.
type Store struct{ dir string }

// metaFile is a golden's record, written last: a directory without it is
// not a golden.
const metaFile = "meta.json"

// buildPrefix marks a golden being built; Reconcile removes those a dead
// process left.
const buildPrefix = ".build-"

// Golden is one golden snapshot on disk.
type Golden struct {
	Key     Key       `json:"key"`
	Created time.Time `json:"created"`
	Dir     string    `json:"-"`
}

// Path is the golden's file name.
func (g *Golden) Path(name string) string { return filepath.Join(g.Dir, name) }

// Open returns the store rooted at dir, creating it 0700.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's root.
func (s *Store) Dir() string { return s.dir }

func (s *Store) goldenDir(k Key) string { return filepath.Join(s.dir, k.Backend, k.ID()) }

// Find returns the golden for k, or ErrNotFound. A directory whose record
// names another key, or whose files are not root's and private, is not
// trusted: it is removed and reported as not found.
func (s *Store) Find(k Key) (*Golden, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	dir := s.goldenDir(k)
	var g Golden
	if err := readRecord(dir, &g); err != nil {
		return nil, err
	}
	if g.Key != k || checkPrivate(dir) != nil {
		os.RemoveAll(dir)
		return nil, ErrNotFound
	}
	g.Dir = dir
	return &g, nil
}

// Build is a golden being written; nothing sees it until Commit.
type Build struct {
	s   *Store
	key Key
	dir string
}

// Begin starts a golden for k in a private directory of its own.
func (s *Store) Begin(k Key) (*Build, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	parent := filepath.Join(s.dir, k.Backend)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var r [6]byte
	rand.Read(r[:])
	// The builder's pid is in the name: Reconcile removes only builds whose
	// process is gone, never one another live process is writing.
	dir := filepath.Join(parent, fmt.Sprintf("%s%s-%d-%s", buildPrefix, k.ID(), os.Getpid(), hex.EncodeToString(r[:])))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &Build{s: s, key: k, dir: dir}, nil
}

// Dir is where the backend writes the golden's files (0600 each).
func (b *Build) Dir() string { return b.dir }

// Path is a file name inside the build.
func (b *Build) Path(name string) string { return filepath.Join(b.dir, name) }

// Commit checks the files, writes the record and moves the golden into
// place. If another process committed the same key first, its golden
// wins and this build is removed.
func (b *Build) Commit() (*Golden, error) {
	if err := checkPrivate(b.dir); err != nil {
		b.Abort()
		return nil, err
	}
	g := &Golden{Key: b.key, Created: time.Now().UTC()}
	rec, _ := json.Marshal(g)
	if err := writeSynced(filepath.Join(b.dir, metaFile), rec); err != nil {
		b.Abort()
		return nil, err
	}
	dst := b.s.goldenDir(b.key)
	if err := os.Rename(b.dir, dst); err != nil {
		b.Abort()
		if existing, ferr := b.s.Find(b.key); ferr == nil {
			return existing, nil
		}
		return nil, fmt.Errorf("snapshot: commit: %w", err)
	}
	g.Dir = dst
	return g, nil
}

// Abort removes the build. It is safe after Commit.
func (b *Build) Abort() { os.RemoveAll(b.dir) }

// Remove invalidates the golden for k.
func (s *Store) Remove(k Key) error {
	if err := os.RemoveAll(s.goldenDir(k)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Reconcile removes every build a dead process left under backend and
// every golden of backend that keep rejects (nil keeps every intact one);
// it returns what it removed. Run it at start-up, before anything builds,
// and again when the backend's key changes.
func (s *Store) Reconcile(backend string, keep func(Key) bool) ([]string, error) {
	parent := filepath.Join(s.dir, backend)
	ents, err := os.ReadDir(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		p := filepath.Join(parent, e.Name())
		if strings.HasPrefix(e.Name(), buildPrefix) && builderAlive(e.Name()) {
			continue
		}
		if !strings.HasPrefix(e.Name(), buildPrefix) {
			var g Golden
			b, err := os.ReadFile(filepath.Join(p, metaFile))
			if err == nil && json.Unmarshal(b, &g) == nil && g.Key.ID() == e.Name() && (keep == nil || keep(g.Key)) {
				continue
			}
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// readRecord decodes dir's record into v: ErrNotFound without one, and
// for one that does not decode (a damaged record is not trusted).
func readRecord(dir string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return ErrNotFound
	}
	return nil
}

// builderAlive reports whether the process that named build is running.
func builderAlive(build string) bool {
	f := strings.Split(strings.TrimPrefix(build, buildPrefix), "-")
	if len(f) != 3 {
		return false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 {
		return false
	}
	return pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH
}

// checkPrivate verifies that dir is 0700 and every file in it 0600, both
// owned by this process's user.
func checkPrivate(dir string) error {
	var bad []string
	check := func(p string, want fs.FileMode) {
		st, err := os.Lstat(p)
		if err != nil {
			bad = append(bad, err.Error())
			return
		}
		sys, _ := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != want || (st.Mode().Type() != 0 && !st.IsDir()) || sys == nil || int(sys.Uid) != os.Geteuid() {
			bad = append(bad, fmt.Sprintf("%s is %v", filepath.Base(p), st.Mode()))
		}
	}
	check(dir, 0o700)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, e := range ents {
		check(filepath.Join(dir, e.Name()), 0o600)
	}
	if len(bad) > 0 {
		return fmt.Errorf("snapshot: files not private: %s", strings.Join(bad, ", "))
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}
