package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamArrivesWhileTheJobRuns proves output is live, without a clock:
// the job prints, then waits for a file the test writes only after the
// first piece arrived, then prints again. Had the agent held its output to
// the end, the job would wait until its wall limit and the test would see
// a timeout instead.
func TestStreamArrivesWhileTheJobRuns(t *testing.T) {
	dir := t.TempDir()
	host, guest := net.Pipe()
	go Serve(context.Background(), guest)
	c := NewClient(host)
	defer c.Close()
	var got []Output
	rep, err := c.DoStream(context.Background(), Job{ID: "s1", Dir: dir, Stream: true, Output: 8, Wall: 20e9,
		Argv: []string{"/bin/sh", "-c", `printf first; echo err >&2; while [ ! -e go ]; do sleep 0.01; done; printf second-past-the-cap`}},
		func(o Output) {
			got = append(got, o)
			if o.Fd == 1 && string(o.Data) == "first" {
				if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
					t.Error(err)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimedOut || rep.ExitCode != 0 {
		t.Fatalf("job did not see the file the first piece released: %+v", rep)
	}
	var out, errs strings.Builder
	for _, o := range got {
		map[int]*strings.Builder{1: &out, 2: &errs}[o.Fd].Write(o.Data)
	}
	// The cap holds on the stream: 8 bytes of stdout, the rest dropped.
	if out.String() != "firstsec" || errs.String() != "err\n" || !rep.StdoutTruncated || rep.StderrTruncated {
		t.Fatalf("streamed stdout %q stderr %q truncated %v/%v", out.String(), errs.String(), rep.StdoutTruncated, rep.StderrTruncated)
	}
	if len(rep.Stdout) != 0 || len(rep.Stderr) != 0 {
		t.Fatalf("a streaming job's reply repeated its output: %q %q", rep.Stdout, rep.Stderr)
	}
	// The connection serves the next, non-streaming job as before.
	rep, err = c.Do(context.Background(), Job{ID: "s2", Argv: []string{"/bin/echo", "plain"}, Output: 100})
	if err != nil || string(rep.Stdout) != "plain\n" {
		t.Fatalf("next job: %q %v", rep.Stdout, err)
	}
}

// TestOutputFrameForAPlainJobIsAProtocolError: a hostile agent (it shares
// the sandbox with the tenant) cannot push output frames at a host that
// did not ask for them.
func TestOutputFrameForAPlainJobIsAProtocolError(t *testing.T) {
	host, guest := net.Pipe()
	go func() {
		var job Job
		if ReadFrame(guest, &job) == nil {
			WriteFrame(guest, Reply{ID: job.ID, Out: &Output{Fd: 1, Data: []byte("x")}})
		}
	}()
	c := NewClient(host)
	defer c.Close()
	_, err := c.Do(context.Background(), Job{ID: "p1", Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "unexpected output frame") {
		t.Fatalf("err = %v, want an unexpected output frame", err)
	}
}
