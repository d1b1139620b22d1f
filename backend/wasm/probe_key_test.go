package wasm

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestEngineStartsOnFirstUse: a backend that never runs wasm makes no
// engine and starts no ticker (a command run on another backend pays
// nothing for it); the first run starts both, and Close stops them.
func TestEngineStartsOnFirstUse(t *testing.T) {
	before := runtime.NumGoroutine()
	idle := newBackend(t)
	if idle.engine != nil || idle.modules != nil {
		t.Fatal("New made the engine")
	}
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t)
	if c := b.Probe(context.Background()); !c.Available {
		t.Fatalf("probe: %s", c.Reason)
	}
	if b.engine == nil || b.modules == nil {
		t.Fatal("a run made no engine")
	}
	b.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
}

// TestWasmProbeKeyFollowsTheWorker: the probe runs in the worker binary,
// so replacing it changes the key; an answer of another configuration is
// not adopted.
func TestWasmProbeKeyFollowsTheWorker(t *testing.T) {
	dir := t.TempDir()
	worker := filepath.Join(dir, "worker")
	if err := os.WriteFile(worker, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, func(c *Config) { c.Worker = []string{worker, "wasm-worker"} })
	k0 := b.ProbeKey()
	at := time.Now().Add(time.Hour)
	if err := os.Chtimes(worker, at, at); err != nil {
		t.Fatal(err)
	}
	if b.ProbeKey() == k0 {
		t.Error("a replaced worker binary kept the key")
	}
	other := newBackend(t, func(c *Config) { c.EpochTick = 3 * time.Millisecond })
	if other.ProbeKey() == b.ProbeKey() {
		t.Error("another epoch tick kept the key")
	}
	capa := other.Probe(context.Background())
	if err := b.Adopt(context.Background(), capa); err == nil {
		t.Error("adopted another configuration's answer")
	}
	if err := other.Adopt(context.Background(), capa); err != nil {
		t.Errorf("its own answer: %v", err)
	}
}
