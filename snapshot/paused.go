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
	"regexp"
	"strings"
	"time"
)

// A paused sandbox is a tenant's: it lives in Dir/paused/<backend>/<id>/,
// its record names the tenant and the key it was saved under, and Open
// refuses it to any other tenant before a byte of it is read.

// ErrWrongTenant is returned by OpenPaused for another tenant's snapshot.
var ErrWrongTenant = errors.New("snapshot: this paused sandbox belongs to another tenant")

// PausedRecord is a paused sandbox's record.
type PausedRecord struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Key     Key       `json:"key"` // what it needs to resume: the same runtime, kernel and config
	Created time.Time `json:"created"`
	Dir     string    `json:"-"`
}

// Path is a file name inside the paused sandbox.
func (p *PausedRecord) Path(name string) string { return filepath.Join(p.Dir, name) }

var pausedIDRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func (s *Store) pausedDir(backend, id string) string {
	return filepath.Join(s.dir, "paused", backend, id)
}

// BeginPaused starts a paused sandbox of tenant under key k.
func (s *Store) BeginPaused(k Key, tenant string) (*PausedBuild, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	if tenant == "" {
		return nil, fmt.Errorf("snapshot: a paused sandbox needs its tenant")
	}
	var r [12]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	parent := filepath.Join(s.dir, "paused", k.Backend)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	dir := filepath.Join(parent, fmt.Sprintf("%s%s-%d-%s", buildPrefix, id, os.Getpid(), "000000000000"))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &PausedBuild{s: s, rec: PausedRecord{ID: id, Tenant: tenant, Key: k}, dir: dir}, nil
}

// PausedBuild is a paused sandbox being written.
type PausedBuild struct {
	s   *Store
	rec PausedRecord
	dir string
}

// Path is a file name inside the build (0600 each).
func (b *PausedBuild) Path(name string) string { return filepath.Join(b.dir, name) }

// Dir is the build's directory, for a tool that writes its files there.
func (b *PausedBuild) Dir() string { return b.dir }

// Commit checks the files, writes the record and moves it into place.
func (b *PausedBuild) Commit() (*PausedRecord, error) {
	if err := checkPrivate(b.dir); err != nil {
		b.Abort()
		return nil, err
	}
	b.rec.Created = time.Now().UTC()
	js, _ := json.Marshal(b.rec)
	if err := writeSynced(filepath.Join(b.dir, metaFile), js); err != nil {
		b.Abort()
		return nil, err
	}
	dst := b.s.pausedDir(b.rec.Key.Backend, b.rec.ID)
	if err := os.Rename(b.dir, dst); err != nil {
		b.Abort()
		return nil, fmt.Errorf("snapshot: commit: %w", err)
	}
	rec := b.rec
	rec.Dir = dst
	return &rec, nil
}

// Abort removes the build.
func (b *PausedBuild) Abort() { os.RemoveAll(b.dir) }

// OpenPaused returns the paused sandbox id of backend for tenant:
// ErrNotFound if there is none, ErrWrongTenant if it is another tenant's.
func (s *Store) OpenPaused(backend, id, tenant string) (*PausedRecord, error) {
	if !backendRE.MatchString(backend) || !pausedIDRE.MatchString(id) {
		return nil, ErrNotFound
	}
	dir := s.pausedDir(backend, id)
	var rec PausedRecord
	if err := readRecord(dir, &rec); err != nil {
		return nil, err
	}
	if rec.ID != id || checkPrivate(dir) != nil {
		return nil, ErrNotFound
	}
	if rec.Tenant != tenant {
		return nil, ErrWrongTenant
	}
	rec.Dir = dir
	return &rec, nil
}

// RemovePaused deletes a paused sandbox (resumed, or given up).
func (s *Store) RemovePaused(backend, id string) error {
	if !backendRE.MatchString(backend) || !pausedIDRE.MatchString(id) {
		return nil
	}
	if err := os.RemoveAll(s.pausedDir(backend, id)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// PausedIDs lists the committed paused sandboxes of backend.
func (s *Store) PausedIDs(backend string) ([]string, error) {
	if !backendRE.MatchString(backend) {
		return nil, fmt.Errorf("snapshot: bad backend name %q", backend)
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "paused", backend))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if pausedIDRE.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// ReconcilePaused removes the paused-sandbox builds of backend that a dead
// process left. Committed paused sandboxes stay: they are tenants' state,
// removed when resumed or given up.
func (s *Store) ReconcilePaused(backend string) error {
	parent := filepath.Join(s.dir, "paused", backend)
	ents, err := os.ReadDir(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), buildPrefix) && !builderAlive(e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(parent, e.Name())))
		}
	}
	return errors.Join(errs...)
}
