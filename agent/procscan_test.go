package agent

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		line string
		want procStat
		bad  bool
	}{
		{line: "42 (sleep) S 1 42 42 0 -1 4194560 100", want: procStat{state: 'S', ppid: 1, sid: 42}},
		// A comm may hold spaces and parentheses; the last ')' ends it.
		{line: "7 (a) b) Z 3 5 9 0", want: procStat{state: 'Z', ppid: 3, sid: 9}},
		{line: "7 (x) S 3", bad: true},
		{line: "7 x S 3 4 5", bad: true},
		{line: "7 (x) S a 4 5", bad: true},
	}
	for _, c := range cases {
		got, err := parseStat([]byte(c.line))
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("parseStat(%q) = %+v, %v", c.line, got, err)
		}
	}
}

// TestScanProcsSeesItself: this process is in /proc with its own session.
func TestScanProcsSeesItself(t *testing.T) {
	ps, err := scanProcs()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.pid == pid() {
			if p.sid != sid() || p.ppid != ppid() || p.zombie() {
				t.Fatalf("self: %+v, want sid %d ppid %d", p, sid(), ppid())
			}
			return
		}
	}
	t.Fatalf("pid %d not found among %d processes", pid(), len(ps))
}

func pid() int  { return os.Getpid() }
func ppid() int { return os.Getppid() }
func sid() int {
	s, err := unix.Getsid(0)
	if err != nil {
		panic(err)
	}
	return s
}
