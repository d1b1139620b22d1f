package store

import (
	"testing"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// TestExecRecords: a start is recorded once; its end replaces it once and
// never again; an end without a start is recorded; a stop interrupts what
// ran; the purge takes what ended before its cutoff.
func TestExecRecords(t *testing.T) {
	st, err := Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(f func(Exec, func(error)), rec Exec) error {
		ch := make(chan error, 1)
		f(rec, func(err error) { ch <- err })
		return <-ch
	}
	now := time.Unix(1000, 0).UTC()
	run := Exec{ID: "e1", Session: "s1", Tenant: "acme", State: ExecRunning, Started: now}
	if err := put(st.BeginExec, run); err != nil {
		t.Fatal(err)
	}
	if err := put(st.BeginExec, run); err == nil || err.Error() != "store: exec s1/e1: already recorded (running)" {
		t.Fatalf("second start: %v", err)
	}
	end := run
	end.State, end.Ended, end.Result = ExecDone, now, &sandbox.Result{Stdout: []byte("x")}
	if err := put(st.PutExec, end); err != nil {
		t.Fatal(err)
	}
	if err := put(st.PutExec, end); err == nil || err.Error() != "store: exec s1/e1: already done" {
		t.Fatalf("second end: %v", err)
	}
	if err := put(st.PutExec, Exec{ID: "e2", Session: "s1", State: ExecDone, Ended: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := put(st.BeginExec, Exec{ID: "e3", Session: "s1", State: ExecRunning}); err != nil {
		t.Fatal(err)
	}
	if err := put(st.BeginExec, Exec{ID: "e4", Session: "s2", State: ExecRunning, Background: true}); err != nil {
		t.Fatal(err)
	}
	keep := func(session string) bool { return session == "s2" } // paused by snapshot
	if n, err := st.InterruptExecs(now.Add(2*time.Hour), keep); err != nil || n != 1 {
		t.Fatalf("interrupt: %d %v", n, err)
	}
	if recs, err := st.RunningExecs("s2"); err != nil || len(recs) != 1 || recs[0].ID != "e4" || recs[0].State != ExecRunning {
		t.Fatalf("a kept session's execs after interrupt: %+v %v", recs, err)
	}
	if recs, err := st.RunningExecs("s1"); err != nil || len(recs) != 0 {
		t.Fatalf("running execs of s1 after interrupt: %+v %v", recs, err)
	}
	if rec, _ := st.GetExec("s1", "e3"); rec.State != ExecInterrupted || rec.Result.Class != sandbox.Lost {
		t.Fatalf("e3 after interrupt: %+v", rec)
	}
	if n, err := st.PurgeExecs(now.Add(30 * time.Minute)); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := st.GetExec("s1", "e1"); err == nil {
		t.Fatal("e1 survived the purge")
	}
	if rec, err := st.GetExec("s1", "e2"); err != nil || rec.State != ExecDone {
		t.Fatalf("e2: %+v %v", rec, err)
	}
}
