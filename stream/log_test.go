package stream

import (
	"reflect"
	"sync"
	"testing"

	"github.com/wovyr/wovyr/sandbox"
)

func chunk(st sandbox.Stream, s string) sandbox.Chunk {
	return sandbox.Chunk{Stream: st, Data: []byte(s)}
}

// TestMergesOnlyWhatNoReaderSaw: unseen chunks of one stream merge (the
// chunk count grows with readers, not with writes); a chunk a reader took
// never changes.
func TestMergesOnlyWhatNoReaderSaw(t *testing.T) {
	l := New()
	l.Add(chunk(sandbox.Stdout, "a"))
	l.Add(chunk(sandbox.Stdout, "b"))
	got, ended, wake := l.Read(0)
	if ended || !reflect.DeepEqual(got, []sandbox.Chunk{chunk(sandbox.Stdout, "ab")}) {
		t.Fatalf("read %q ended %v", got, ended)
	}
	l.Add(chunk(sandbox.Stdout, "c"))
	select {
	case <-wake:
	default:
		t.Fatal("Add did not wake the reader")
	}
	l.Add(chunk(sandbox.Stderr, "x"))
	l.Add(chunk(sandbox.Stderr, "y"))
	if got[0].Data[0] != 'a' || len(got[0].Data) != 2 {
		t.Fatalf("a seen chunk changed: %q", got[0].Data)
	}
	want := []sandbox.Chunk{chunk(sandbox.Stdout, "ab"), chunk(sandbox.Stdout, "c"), chunk(sandbox.Stderr, "xy")}
	if all := l.Chunks(); !reflect.DeepEqual(all, want) {
		t.Fatalf("chunks %q, want %q", all, want)
	}
	l.End()
	l.Add(chunk(sandbox.Stdout, "late"))
	if rest, ended, _ := l.Read(3); len(rest) != 0 || !ended {
		t.Fatalf("after End: %q ended %v", rest, ended)
	}
}

// TestHammer: writers and readers at once (-race); every reader that
// follows to the end sees exactly the log's final chunks.
func TestHammer(t *testing.T) {
	l := New()
	var wg sync.WaitGroup
	results := make([][]sandbox.Chunk, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen []sandbox.Chunk
			for {
				c, ended, wake := l.Read(len(seen))
				seen = append(seen, c...)
				if ended {
					results[i] = seen
					return
				}
				<-wake
			}
		}()
	}
	for n := 0; n < 2000; n++ {
		l.Add(chunk([]sandbox.Stream{sandbox.Stdout, sandbox.Stderr}[n%3/2], "z"))
	}
	l.End()
	wg.Wait()
	final := l.Chunks()
	for i, r := range results {
		if !reflect.DeepEqual(r, final) {
			t.Fatalf("reader %d saw %d chunks, the log holds %d", i, len(r), len(final))
		}
	}
}
