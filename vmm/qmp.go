package vmm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// qmp is a client of QEMU's machine protocol on the host end of a
// socketpair: one command at a time, events skipped. Only a VM that can be
// snapshotted or restored has one (Spec.RAM); nothing but wovyr holds its
// other end.
type qmp struct {
	conn *net.UnixConn
	r    *bufio.Reader
}

// errQMP is a command QEMU refused; its text is QEMU's.
var errQMP = errors.New("qmp")

func newQMP(c net.Conn, deadline time.Time) (*qmp, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("vmm: qmp needs a unix socket, not %T", c)
	}
	q := &qmp{conn: uc, r: bufio.NewReader(uc)}
	if err := uc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := q.read(&greeting); err != nil {
		return nil, fmt.Errorf("vmm: qmp greeting: %w", err)
	}
	if greeting.QMP == nil {
		return nil, fmt.Errorf("vmm: qmp: no greeting")
	}
	if err := q.do(deadline, "qmp_capabilities", nil, nil, nil); err != nil {
		return nil, err
	}
	return q, nil
}

// read reads the next non-event message into v.
func (q *qmp) read(v any) error {
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return err
		}
		var probe struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(line, &probe) == nil && probe.Event != "" {
			continue
		}
		return json.Unmarshal(line, v)
	}
}

// do runs one command; fd, if not nil, travels with it (SCM_RIGHTS, for
// getfd). ret receives the "return" member.
func (q *qmp) do(deadline time.Time, cmd string, args any, fd *os.File, ret any) error {
	if err := q.conn.SetDeadline(deadline); err != nil {
		return err
	}
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if fd != nil {
		_, _, err = q.conn.WriteMsgUnix(b, syscall.UnixRights(int(fd.Fd())), nil)
	} else {
		_, err = q.conn.Write(b)
	}
	if err != nil {
		return fmt.Errorf("vmm: qmp %s: %w", cmd, err)
	}
	var rep struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := q.read(&rep); err != nil {
		return fmt.Errorf("vmm: qmp %s: %w", cmd, err)
	}
	if rep.Error != nil {
		return fmt.Errorf("vmm: %w %s: %s: %s", errQMP, cmd, rep.Error.Class, rep.Error.Desc)
	}
	if ret != nil && rep.Return != nil {
		return json.Unmarshal(rep.Return, ret)
	}
	return nil
}

// ignoreShared sets whether migration skips RAM that lives in a shared
// file (the golden RAM memfd): on, only device state is in the stream.
func (q *qmp) ignoreShared(deadline time.Time, on bool) error {
	return q.do(deadline, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": on}},
	}, nil, nil)
}
