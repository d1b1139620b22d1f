package vmm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// A machine with a QMP channel (Spec.Control, RAM or Incoming) can be
// saved — its device state for a golden snapshot (Save), or everything for
// a tenant's pause (SaveAll) — and one started with Spec.Incoming is
// restored from such a stream instead of booting.

// qmpTimeout bounds one QMP exchange when the caller's context has no
// sooner deadline.
const qmpTimeout = 10 * time.Second

func qmpDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(qmpTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// startQMP greets the VMM's monitor and, for a restore, starts reading the
// incoming stream from descriptor fd; the guest runs once it is read.
func (m *machine) startQMP(ctx context.Context, s *Spec, fd int) error {
	deadline := qmpDeadline(ctx)
	q, err := newQMP(m.qmpConn, deadline)
	if err != nil {
		return err
	}
	m.qmp, m.sharedRAM = q, s.SharedRAM
	if s.Incoming == nil {
		return nil
	}
	if err := q.ignoreShared(deadline, s.RAM != nil); err != nil {
		return err
	}
	return q.do(deadline, "migrate-incoming", map[string]any{"uri": "fd:" + strconv.Itoa(fd)}, nil, nil)
}

// Save implements Machine: migrate to w with x-ignore-shared, so the stream
// holds device state only.
func (m *machine) Save(ctx context.Context, w *os.File) error {
	if m.qmp == nil || !m.sharedRAM {
		// A clone's RAM is private: saving it would make a golden of
		// memory a tenant may have run in.
		return errors.New("vmm: only a machine with shared RAM (Spec.RAM, SharedRAM) can be saved")
	}
	return m.migrate(ctx, w, true)
}

// SaveAll implements Machine: migrate device state and RAM to w.
func (m *machine) SaveAll(ctx context.Context, w *os.File) error {
	if m.qmp == nil {
		return errors.New("vmm: this machine has no QMP channel (Spec.Control)")
	}
	return m.migrate(ctx, w, false)
}

// migrate writes the machine's state to w and waits until QEMU reports it
// complete; the guest stays paused.
func (m *machine) migrate(ctx context.Context, w *os.File, ignoreShared bool) error {
	m.qmpMu.Lock()
	defer m.qmpMu.Unlock()
	deadline := qmpDeadline(ctx)
	q := m.qmp
	if err := q.ignoreShared(deadline, ignoreShared); err != nil {
		return err
	}
	// QEMU writes into a pipe and wovyr copies it to w: the VMM's
	// RLIMIT_FSIZE (the size of its largest disk) must not bound a stream
	// that carries RAM, and QEMU never holds a descriptor of the file.
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("vmm: snapshot pipe: %w", err)
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, pr)
		pr.Close()
		copied <- err
	}()
	err = q.do(deadline, "getfd", map[string]any{"fdname": "snapshot"}, pw, nil)
	pw.Close() // QEMU holds its own copy; its close at the end is the copy's EOF
	if err == nil {
		err = q.do(deadline, "migrate", map[string]any{"uri": "fd:snapshot"}, nil, nil)
	}
	if err == nil {
		err = m.waitMigrated(ctx, deadline)
	}
	if err != nil {
		m.Kill() // a half-written stream: the VMM must not keep its end open
		<-copied
		return err
	}
	return <-copied
}

// waitMigrated polls QEMU until the outgoing migration ends.
func (m *machine) waitMigrated(ctx context.Context, deadline time.Time) error {
	q := m.qmp
	for {
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := q.do(deadline, "query-migrate", nil, nil, &st); err != nil {
			return err
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("vmm: snapshot %s: %s", st.Status, st.Error)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.child.Done():
			return fmt.Errorf("vmm: the VMM exited during the snapshot: %s", tailLine(m.console.Bytes()))
		case <-time.After(time.Millisecond):
		}
	}
}

// tailLine is the console's last line, for a failure QEMU explains there.
func tailLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
