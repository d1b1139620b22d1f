package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wovyr/wovyr/cert"
)

// TestCertSnapshotAnswersAsFind: the lazily decoded snapshot gives what
// cert.Find over every record gives — the exact record, or the same reason.
func TestCertSnapshotAnswersAsFind(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	rec := func(b, v string, at time.Time, pass bool) cert.Record {
		return cert.Record{Key: cert.Key{Backend: b, RuntimeVersion: v, Kernel: "k", ConfigHash: "h"}, Passed: pass, At: at,
			Outcomes: []cert.Outcome{{ID: 1, Name: "p", Applies: true, Pass: pass, ControlFlagged: true}}}
	}
	t0 := time.Unix(1e9, 0).UTC()
	for _, r := range []cert.Record{rec("container", "crun 1", t0, true), rec("container", "crun 2", t0.Add(time.Hour), false), rec("gvisor", "runsc 1", t0, true)} {
		if err := s.PutCert(r); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.CertSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Certs()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []cert.Key{
		{Backend: "container", RuntimeVersion: "crun 1", Kernel: "k", ConfigHash: "h"},
		{Backend: "container", RuntimeVersion: "crun 2", Kernel: "k", ConfigHash: "h"},
		{Backend: "container", RuntimeVersion: "crun 3", Kernel: "k", ConfigHash: "h"},
		{Backend: "gvisor", RuntimeVersion: "runsc 1", Kernel: "other", ConfigHash: "h"},
		{Backend: "microvm", RuntimeVersion: "qemu", Kernel: "k", ConfigHash: "h"},
	} {
		got, gerr := snap.Cert(k)
		want, werr := cert.Find(all, k)
		if errors.Is(gerr, cert.ErrNotCertified) != errors.Is(werr, cert.ErrNotCertified) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Errorf("%v: snapshot says %v, Find says %v", k, gerr, werr)
		}
		if got.Key != want.Key || got.Passed != want.Passed {
			t.Errorf("%v: snapshot gave %+v, Find %+v", k, got.Key, want.Key)
		}
	}
	if _, err := snap.Cert(cert.Key{Backend: "container", RuntimeVersion: "crun 3", Kernel: "k", ConfigHash: "h"}); err == nil ||
		!strings.Contains(err.Error(), `certified for runtime "crun 2"`) {
		t.Errorf("want the newest record's difference, got %v", err)
	}
}
