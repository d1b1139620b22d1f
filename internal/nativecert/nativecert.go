// Package nativecert certifies the native backend for tests that run a
// daemon on it: the real escape battery, once per test binary, with a
// wovyr-guest built for it. The record's key (backend version, kernel,
// config hash) does not depend on the state dir, so every store of the
// binary's daemons takes the same record.
package nativecert

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/backend/native"
	"github.com/wovyr/wovyr/battery"
	"github.com/wovyr/wovyr/cert"
)

var (
	once sync.Once
	rec  cert.Record
	err  error
)

// Certify returns the passing record of b's battery, running it on the
// first call; a failure fails tb.
func Certify(tb testing.TB, b *native.Backend) cert.Record {
	tb.Helper()
	once.Do(func() { rec, err = run(b) })
	if err != nil || !rec.Passed {
		tb.Fatalf("certify native: %v %v", err, rec.Failed())
	}
	return rec
}

func run(b *native.Backend) (cert.Record, error) {
	dir, err := os.MkdirTemp("", "wovyr-guest-test-")
	if err != nil {
		return cert.Record{}, err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // sandbox uids run the guest
	guest := filepath.Join(dir, "wovyr-guest")
	cmd := exec.Command("go", "build", "-o", guest, "github.com/wovyr/wovyr/cmd/wovyr-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return cert.Record{}, fmt.Errorf("build wovyr-guest: %v: %s", err, out)
	}
	return battery.Run(context.Background(), native.Suite(b, guest), nil)
}
