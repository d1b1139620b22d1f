package microvm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// resultDisk is reply as a guest leaves it on a result disk of size bytes.
func resultDisk(reply string, size int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(reply)))
	b = append(b, reply...)
	return append(b, make([]byte, max(0, size-len(b)))...)
}

// FuzzResultDisk reads a result disk a hostile guest wrote and maps it
// onto a result, as a one-shot run does, under an output cap of 1..65536
// bytes. A disk that does not hold one decodable frame is an error (a
// length past the disk is ErrFrameTooLarge); a reply that fillResult
// refuses is a backend failure; an accepted one is for this job, with each
// stream within the cap and a class the guest may cause.
func FuzzResultDisk(f *testing.F) {
	for _, seed := range []struct {
		disk   []byte
		output uint16
	}{
		{nil, 100},
		{make([]byte, 4096), 100},
		{resultDisk(`{"id":"j","exit_code":3,"stdout":"aGk=","stderr":""}`, 4096), 100},
		{resultDisk(`{"id":"j","stdout":"aGk="}`, 0), 1},
		{resultDisk(`{"id":"other"}`, 4096), 100},
		{resultDisk(`{"id":"j","setup":"mount failed"}`, 4096), 100},
		{resultDisk(`{"id":"j","timed_out":true,"oom_killed":true,"signal":"killed"}`, 4096), 100},
		{resultDisk(`{"id":"j","exit_code":127,"error":"`+strings.Repeat("x", 300)+`"}`, 4096), 100},
		{resultDisk(`{"id":"j","stdout":"`+strings.Repeat("A", 200)+`"}`, 4096), 100},
		{append([]byte{0x7f, 0xff, 0xff, 0xff}, make([]byte, 4092)...), 100},
		{append([]byte{0, 0, 0x10, 0}, `{"id":"j"`...), 100},
	} {
		f.Add(seed.disk, seed.output)
	}
	f.Fuzz(func(t *testing.T, disk []byte, output uint16) {
		p := filepath.Join(t.TempDir(), "result.img")
		if err := os.WriteFile(p, disk, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := readResultDisk(p)
		if err != nil {
			if len(disk) >= 4 && int64(binary.BigEndian.Uint32(disk)) > int64(len(disk))-4 && !errors.Is(err, agent.ErrFrameTooLarge) {
				t.Fatalf("a length past the disk: %v, want ErrFrameTooLarge", err)
			}
			return
		}
		n := binary.BigEndian.Uint32(disk)
		if !json.Valid(disk[4 : 4+n]) {
			t.Fatalf("a frame that is not JSON decoded: %q", disk[4:4+n])
		}
		l := sandbox.Limits{Output: int64(output) + 1}.WithDefaults()
		res := &sandbox.Result{}
		if err := fillResult(res, rep, "j", l); err != nil {
			if sandbox.ClassOf(err) != sandbox.BackendFailure {
				t.Fatalf("fillResult = %v, want a backend failure", err)
			}
			return
		}
		switch {
		case rep.ID != "j":
			t.Fatalf("a reply for %q was taken for job j", rep.ID)
		case int64(len(res.Stdout)) > l.Output || int64(len(res.Stderr)) > l.Output:
			t.Fatalf("streams of %d and %d bytes passed the %d-byte cap", len(res.Stdout), len(res.Stderr), l.Output)
		case res.Stdout == nil || res.Stderr == nil:
			t.Fatal("a stream is nil (the API writes null)")
		case res.Class != sandbox.OK && res.Class != sandbox.Timeout && res.Class != sandbox.OOM:
			t.Fatalf("the guest caused class %q", res.Class)
		}
	})
}

// Regression for the fuzzing pass of issue #24: the guest's "could not
// start" message went onto stderr past the output cap, so a hostile guest
// could return a stream of any length its result disk holds.
func TestFillResultKeepsTheNotStartedLineInTheCap(t *testing.T) {
	l := sandbox.Limits{Output: 16}.WithDefaults()
	rep := agent.VMReply{Reply: agent.Reply{ID: "j", ExitCode: 127, Error: strings.Repeat("x", 1000)}}
	res := &sandbox.Result{}
	if err := fillResult(res, rep, "j", l); err != nil {
		t.Fatal(err)
	}
	if want := "wovyr: xxxxxxxxx"; !bytes.Equal(res.Stderr, []byte(want)) || !res.StderrTruncated {
		t.Fatalf("stderr %q truncated %t, want %q truncated", res.Stderr, res.StderrTruncated, want)
	}
}
