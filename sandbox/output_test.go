package sandbox

import (
	"bytes"
	"reflect"
	"testing"
)

func TestOutputMarksKeepLiveCutsAndAddTheRest(t *testing.T) {
	res := &Result{Stdout: []byte("abcdef"), Stderr: bytes.Repeat([]byte("e"), ReplayChunk+3)}
	live := []Chunk{{Stdout, []byte("ab")}, {Stderr, []byte("e")}, {Stdout, []byte("cd")}}
	marks, ok := OutputMarks(live, res)
	want := []OutputMark{{Stdout, 2}, {Stderr, 1}, {Stdout, 2}, {Stdout, 2}, {Stderr, ReplayChunk}, {Stderr, 2}}
	if !ok || !reflect.DeepEqual(marks, want) {
		t.Fatalf("marks %v ok %v, want %v", marks, ok, want)
	}
	got := Replay(marks, res)
	if !reflect.DeepEqual(got[:3], live) {
		t.Fatalf("replay begins %q, want the live chunks %q", got[:3], live)
	}
	var out, errs []byte
	for _, c := range got {
		if c.Stream == Stdout {
			out = append(out, c.Data...)
		} else {
			errs = append(errs, c.Data...)
		}
	}
	if !bytes.Equal(out, res.Stdout) || !bytes.Equal(errs, res.Stderr) {
		t.Fatalf("replay loses output: %q", out)
	}
}

// A backend that streamed what its result does not hold: the record wins
// and is cut afresh.
func TestOutputMarksRefuseALiveStreamUnlikeTheResult(t *testing.T) {
	res := &Result{Stdout: []byte("abc")}
	for _, live := range [][]Chunk{{{Stdout, []byte("x")}}, {{Stdout, []byte("abcd")}}, {{Stderr, []byte("a")}}} {
		marks, ok := OutputMarks(live, res)
		if ok || !reflect.DeepEqual(marks, []OutputMark{{Stdout, 3}}) {
			t.Fatalf("live %q: marks %v ok %v", live, marks, ok)
		}
	}
	// A corrupt record's marks stop the replay, never index past it.
	if got := Replay([]OutputMark{{Stdout, 2}, {Stdout, 5}}, res); len(got) != 1 {
		t.Fatalf("replay of a corrupt record: %q", got)
	}
}

func TestCollectorHoldsTheCap(t *testing.T) {
	var got []Chunk
	c := NewCollector(func(ch Chunk) { got = append(got, ch) }, 4)
	buf := []byte("ab")
	c.Add(Stdout, buf)
	buf[0] = 'X' // the collector copied it
	c.Add(Stderr, []byte("1234"))
	c.Add(Stdout, []byte("cde")) // over the cap: dropped, and says so
	c.Add(Stdout, []byte("c"))   // after a breach nothing more is taken
	out, errs, over := c.Output()
	if string(out) != "ab" || string(errs) != "1234" || !over {
		t.Fatalf("output %q %q over %v", out, errs, over)
	}
	if want := []Chunk{{Stdout, []byte("ab")}, {Stderr, []byte("1234")}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("forwarded %q, want %q", got, want)
	}
}
