package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"
)

// meteredReader records how large a buffer its reader offered at most
// beyond what had arrived so far: ReadFrame must not reserve memory for a
// length the peer only claims.
type meteredReader struct {
	r         *bytes.Reader
	delivered int
	overAsk   int // the largest len(p) - 2*delivered seen
}

func (m *meteredReader) Read(p []byte) (int, error) {
	m.overAsk = max(m.overAsk, len(p)-2*m.delivered)
	n, err := m.r.Read(p)
	m.delivered += n
	return n, err
}

// frame is data behind a 4-byte big-endian length claiming n bytes.
func frame(n uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, data...)
}

// jframe is s as one whole frame.
func jframe(s string) []byte { return frame(uint32(len(s)), []byte(s)) }

// FuzzReadFrame feeds ReadFrame what a hostile sandbox agent or guest could
// write. It asserts that a frame over MaxFrame is refused with
// ErrFrameTooLarge after its header alone; that memory is reserved only as
// bytes arrive; that exactly one frame is consumed; and that what decodes
// re-encodes to a frame that decodes to the same encoding.
func FuzzReadFrame(f *testing.F) {
	reply, _ := json.Marshal(VMReply{Reply: Reply{ID: "j", ExitCode: 3, Stdout: []byte("out"), Wall: time.Second},
		OOMKilled: true, Clock: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)})
	job, _ := json.Marshal(VMJob{Job: Job{ID: "j", Argv: []string{"/bin/true"}, Output: 10,
		Files: []File{{Path: "a", Data: []byte{0}}}}, Thaw: &Thaw{Entropy: make([]byte, MinThawEntropy)}})
	for _, seed := range [][]byte{
		nil,
		{0, 0},                             // a torn header
		frame(0, nil),                      // an empty frame
		frame(uint32(len(reply)), reply),   // a good reply
		frame(uint32(len(job)), job),       // a good job
		frame(uint32(len(reply))+1, reply), // claims one byte more than it sends
		frame(2, []byte("{}{}")),           // a second frame's bytes follow
		frame(MaxFrame, nil),               // the largest allowed claim, nothing behind it
		frame(MaxFrame+1, []byte("{}")),    // one past the bound
		frame(0xffffffff, nil),             // the largest claim
		jframe(`null`),
		jframe(`{"id":1e99}`),                       // a type mismatch
		jframe(`{"clock":"10000-01-01T00:00:00Z"}`), // a year past 9999
		jframe(`{"clock":"2024-01-01T00:00:00+24:00"}`),  // an offset out of range
		jframe(`{"stdout":"not base64!!"}`),              // bad base64
		jframe(`{"wall":99999999999999999999999999999}`), // a duration overflow
		jframe(`{"id":"\ud800","error":"\xff"}`),         // a lone surrogate, a bad escape
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var claim uint32
		if len(data) >= 4 {
			claim = binary.BigEndian.Uint32(data)
		}
		m := &meteredReader{r: bytes.NewReader(data)}
		var rep VMReply
		err := ReadFrame(m, &rep)
		if m.overAsk > 2*frameChunk {
			t.Fatalf("ReadFrame offered a %d-byte buffer beyond twice the %d bytes that had arrived", m.overAsk, m.delivered)
		}
		switch {
		case len(data) < 4:
			if err == nil {
				t.Fatal("a torn header decoded")
			}
			return
		case claim > MaxFrame:
			if !errors.Is(err, ErrFrameTooLarge) || m.delivered != 4 {
				t.Fatalf("a %d-byte claim: err %v after %d bytes, want ErrFrameTooLarge after the header", claim, err, m.delivered)
			}
			return
		case int64(len(data)-4) < int64(claim):
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("a short frame: err %v, want io.ErrUnexpectedEOF", err)
			}
			return
		}
		if m.delivered < 4+int(claim) || m.r.Len() != len(data)-4-int(claim) {
			t.Fatalf("consumed %d bytes of %d, want exactly the %d-byte frame", len(data)-m.r.Len(), len(data), 4+claim)
		}
		if err != nil {
			return // JSON that does not decode into a reply: an error is all it gets
		}
		// The host uses Clock as an instant only; encoding/json accepts
		// offsets (+24:00) it cannot write back.
		rep.Clock = rep.Clock.UTC()
		var once, twice bytes.Buffer
		if err := WriteFrame(&once, rep); err != nil {
			t.Fatalf("a decoded reply does not re-encode: %v", err)
		}
		var again VMReply
		if err := ReadFrame(bytes.NewReader(once.Bytes()), &again); err != nil {
			t.Fatalf("a re-encoded reply does not decode: %v", err)
		}
		if err := WriteFrame(&twice, again); err != nil || !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("re-encoding is not stable (%v):\n%s\n%s", err, once.Bytes(), twice.Bytes())
		}
	})
}

// FuzzReadDiskFrame feeds ReadDiskFrame a result disk as a hostile guest
// leaves it. A frame is read only from inside the disk: an empty or
// over-long length is an error before anything is allocated for it.
func FuzzReadDiskFrame(f *testing.F) {
	reply, _ := json.Marshal(VMReply{Reply: Reply{ID: "j", Stderr: []byte("e")}, Setup: "mount failed"})
	padded := append(frame(uint32(len(reply)), reply), make([]byte, 4096)...)
	for _, seed := range [][]byte{
		nil,
		{0, 0, 0},
		make([]byte, 4096), // nothing was written
		padded,
		frame(uint32(len(reply)), reply), // exactly the disk
		frame(uint32(len(reply))+1, reply),
		append(frame(MaxFrame+1, nil), make([]byte, 64)...),
		frame(0xffffffff, []byte("{}")),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, disk []byte) {
		var rep VMReply
		err := ReadDiskFrame(bytes.NewReader(disk), int64(len(disk)), &rep)
		if len(disk) < 4 {
			if err == nil {
				t.Fatal("a disk without a header decoded")
			}
			return
		}
		claim := int64(binary.BigEndian.Uint32(disk))
		if (claim > MaxFrame || claim > int64(len(disk))-4) && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("a %d-byte claim on a %d-byte disk: err %v, want ErrFrameTooLarge", claim, len(disk), err)
		}
		if claim == 0 && err == nil {
			t.Fatal("an empty frame decoded")
		}
		if err == nil && json.Unmarshal(disk[4:4+claim], new(VMReply)) != nil {
			t.Fatal("ReadDiskFrame accepted bytes that do not decode alone")
		}
	})
}

// Regression for the fuzzing pass of issue #24: ReadFrame allocated the
// length a peer claimed before any of its bytes arrived, so a hostile
// sandbox's four bytes held 160 MiB of the host's memory.
func TestReadFrameReservesOnlyWhatArrives(t *testing.T) {
	m := &meteredReader{r: bytes.NewReader(frame(MaxFrame, []byte(`{"id":`)))}
	var rep Reply
	if err := ReadFrame(m, &rep); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadFrame = %v, want io.ErrUnexpectedEOF", err)
	}
	if m.overAsk > 2*frameChunk {
		t.Fatalf("ReadFrame offered %d bytes beyond what arrived, want at most %d", m.overAsk, 2*frameChunk)
	}
}

// Regression for the same pass: a header with no body was a "short frame"
// that errors.Is took for io.EOF, so Serve read it as a clean end.
func TestReadFrameHeaderWithoutBodyIsNotEOF(t *testing.T) {
	err := ReadFrame(bytes.NewReader(frame(2, nil)), new(Job))
	if errors.Is(err, io.EOF) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadFrame = %v, want io.ErrUnexpectedEOF and not io.EOF", err)
	}
}
