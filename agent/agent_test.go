package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExecuteEnvStdinExit(t *testing.T) {
	dir := t.TempDir()
	rep := Execute(context.Background(), Job{
		ID:     "j1",
		Argv:   []string{"/bin/sh", "-c", `cat; echo "[$FOO]"; env | wc -l; cat in.txt; exit 3`},
		Env:    []string{"FOO=bar"},
		Dir:    dir,
		Stdin:  []byte("from-stdin\n"),
		Files:  []File{{Path: "in.txt", Data: []byte("file-data\n")}},
		Output: 1 << 10,
	})
	// FOO plus the PWD that dash exports itself; nothing of the agent's env leaks.
	want := "from-stdin\n[bar]\n2\nfile-data\n"
	if got := string(rep.Stdout); got != want || rep.ExitCode != 3 || rep.Error != "" {
		t.Fatalf("got %q exit %d err %q, want %q exit 3", got, rep.ExitCode, rep.Error, want)
	}
}

func TestExecuteOutputCapAndDeadline(t *testing.T) {
	rep := Execute(context.Background(), Job{
		ID: "j2", Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero; sleep 30"},
		Output: 1000, Wall: 200 * time.Millisecond,
	})
	if len(rep.Stdout) != 1000 || !rep.StdoutTruncated {
		t.Fatalf("stdout %d bytes truncated=%v, want 1000 true", len(rep.Stdout), rep.StdoutTruncated)
	}
	if !rep.TimedOut || rep.Signal != "killed" {
		t.Fatalf("timed_out=%v signal=%q, want true killed", rep.TimedOut, rep.Signal)
	}
}

func TestExecuteRefusesEscapingFile(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "canary")
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	rep := Execute(context.Background(), Job{ID: "j3", Argv: []string{"/bin/true"}, Dir: dir,
		Files: []File{{Path: "link/canary", Data: []byte("x")}}})
	if rep.Error == "" || rep.ExitCode != 127 {
		t.Fatalf("escaping file accepted: %+v", rep)
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("file written outside the workdir: %v", err)
	}
}

func TestServeAndClient(t *testing.T) {
	host, guest := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), guest) }()
	c := NewClient(host)
	for i, word := range []string{"one", "two"} {
		rep, err := c.Do(context.Background(), Job{ID: word, Argv: []string{"/bin/echo", word}, Output: 100})
		if err != nil || string(rep.Stdout) != word+"\n" {
			t.Fatalf("job %d: %q %v", i, rep.Stdout, err)
		}
	}
	if _, err := c.Do(context.Background(), Job{ID: "bye", Shutdown: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

func TestReadFrameRefusesHugeFrame(t *testing.T) {
	var b bytes.Buffer
	b.Write([]byte{0xff, 0xff, 0xff, 0xff})
	var j Job
	if err := ReadFrame(&b, &j); err != ErrFrameTooLarge {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	if err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 9, '{'}), &j); err == nil || err == io.EOF {
		t.Fatalf("short frame: %v", err)
	}
}

// TestExecuteLeftoverHoldingPipes: a background child that keeps stdout
// open does not hold the reply past waitDelay, and dies with the job.
func TestExecuteLeftoverHoldingPipes(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	rep := Execute(context.Background(), Job{ID: "j4", Output: 100, Wall: 20 * time.Second,
		Argv: []string{"/bin/sh", "-c", "sleep 30 & echo $! > " + pidFile + "; echo hi"}})
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v: the leftover held the reply", took)
	}
	if string(rep.Stdout) != "hi\n" || rep.ExitCode != 0 || rep.TimedOut || rep.Error != "" {
		t.Fatalf("got %+v", rep)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break // gone, or a zombie waiting for init
		}
		if time.Now().After(deadline) {
			t.Fatalf("leftover %s still runs", pid)
		}
	}
}

// TestExecuteCancelIsNotTimeout: cancelling ctx kills the job; the reply
// says killed, not timed out.
func TestExecuteCancelIsNotTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	rep := Execute(ctx, Job{ID: "j5", Argv: []string{"/bin/sleep", "30"}, Wall: time.Minute})
	if rep.TimedOut || rep.Signal != "killed" || rep.ExitCode != 137 {
		t.Fatalf("got %+v, want killed, not timed out", rep)
	}
}

// TestExecuteBigStreams: output on both streams beyond a pipe's buffer,
// and stdin the job never reads, neither deadlock nor get lost below the
// cap.
func TestExecuteBigStreams(t *testing.T) {
	rep := Execute(context.Background(), Job{ID: "j6", Output: 1 << 20, Wall: 30 * time.Second,
		Stdin: bytes.Repeat([]byte("x"), 1<<20),
		Argv:  []string{"/bin/sh", "-c", "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2; exit 4"}})
	if len(rep.Stdout) != 300000 || len(rep.Stderr) != 200000 || rep.StdoutTruncated || rep.StderrTruncated || rep.ExitCode != 4 {
		t.Fatalf("stdout %d stderr %d truncated %v/%v exit %d (%s)", len(rep.Stdout), len(rep.Stderr),
			rep.StdoutTruncated, rep.StderrTruncated, rep.ExitCode, rep.Error)
	}
	rep = Execute(context.Background(), Job{ID: "j7", Output: 1 << 20, Wall: 30 * time.Second,
		Stdin: []byte("line1\nline2\n"), Argv: []string{"/bin/cat"}})
	if string(rep.Stdout) != "line1\nline2\n" {
		t.Fatalf("cat: %q", rep.Stdout)
	}
}
