package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
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
