package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wovyr/wovyr/probecache"
	"github.com/wovyr/wovyr/sandbox"
)

func TestProbesRoundTripAndTrim(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	t0 := time.Unix(1e9, 0).UTC()
	for i := range probesPerBackend + 2 {
		r := probecache.Record{Backend: "container", Key: fmt.Sprint("k", i), Kernel: "6.18", At: t0.Add(time.Duration(i) * time.Minute),
			Capability: sandbox.Capability{Available: true, Version: "crun version 1.8.1", ConfigHash: "h"}}
		if err := s.PutProbe(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutProbe(probecache.Record{Backend: "gvisor", Key: "g", At: t0}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	for i := range probesPerBackend + 2 {
		r, ok := s.CachedProbe("container", fmt.Sprint("k", i))
		if kept := i >= 2; ok != kept {
			t.Errorf("k%d: stored %v, want %v (the newest %d of a backend are kept)", i, ok, kept, probesPerBackend)
		} else if ok && (r.Capability.Version != "crun version 1.8.1" || !r.At.Equal(t0.Add(time.Duration(i)*time.Minute))) {
			t.Errorf("k%d came back as %+v", i, r)
		}
	}
	if _, ok := s.CachedProbe("gvisor", "g"); !ok {
		t.Error("another backend's answer was trimmed")
	}
	if _, ok := s.CachedProbe("gvisor", "k5"); ok {
		t.Error("an answer came back for another backend's key")
	}
}

// TestOpenWritesNothing: opening a store that has its buckets only reads
// it (a write transaction is two fsyncs every one-shot command would pay).
func TestOpenWritesNothing(t *testing.T) {
	dir := t.TempDir()
	open(t, dir).Close()
	db := filepath.Join(dir, "wovyr.db")
	before, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	old := before.ModTime().Add(-time.Hour)
	if err := os.Chtimes(db, old, old); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir)
	if _, ok := s.CachedProbe("native", "k"); ok {
		t.Fatal("empty store has a probe")
	}
	s.Close()
	after, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(old) {
		t.Fatalf("open and close of a complete store wrote it (mtime %v, was %v)", after.ModTime(), old)
	}
}
