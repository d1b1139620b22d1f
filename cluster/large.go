package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/wovyr/wovyr/sandbox"
)

// A record can be larger than one NATS message: output is capped at 64 MiB
// a stream, and JSON carries it as base64. Such a record crosses in parts:
// the answer holds the record without its output, and the output's sizes
// (answer.Large); the reader then asks the holder for the output in pieces
// (wovyr.node.<name>.part) and puts it back, so every node answers the
// same record whatever its size.

// outputSizes are the lengths of a record's output left out of an answer.
type outputSizes struct {
	Stdout int `json:"stdout"`
	Stderr int `json:"stderr"`
}

// partRequest asks for n bytes of a record's output stream from offset.
type partRequest struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Stream string `json:"stream"` // "stdout" or "stderr"
	Offset int    `json:"offset"`
	Len    int    `json:"len"`
}

// hdrPartError carries a part request's refusal; its body is then empty.
const hdrPartError = "Wovyr-Error"

// encode is a's wire form: whole if it fits in a message, else without the
// record's output (answer.Large).
func (n *Node) encode(a answer) []byte {
	b, err := json.Marshal(a)
	if err != nil || len(b) <= n.maxMessage() {
		return b
	}
	if a.Record != nil && a.Record.Result != nil {
		rec, res := *a.Record, *a.Record.Result
		a.Large = &outputSizes{Stdout: len(res.Stdout), Stderr: len(res.Stderr)}
		res.Stdout, res.Stderr = nil, nil
		rec.Result = &res
		a.Record = &rec
		if b, err = json.Marshal(a); err == nil && len(b) <= n.maxMessage() {
			return b
		}
	}
	b, _ = json.Marshal(answer{Code: sandbox.BackendFailure, Message: "the record is larger than the cluster carries"})
	return b
}

// maxMessage is the largest message this connection sends, less room for
// headers.
func (n *Node) maxMessage() int { return int(n.nc.MaxPayload()) - 4<<10 }

// complete puts back the output an answer from node left out.
func (n *Node) complete(ctx context.Context, node, tenant string, a *answer) error {
	if a.Large == nil || a.Record == nil || a.Record.Result == nil {
		return nil
	}
	res := *a.Record.Result
	var err error
	if res.Stdout, err = n.fetchOutput(ctx, node, tenant, a.Record.ID, "stdout", a.Large.Stdout); err != nil {
		return err
	}
	if res.Stderr, err = n.fetchOutput(ctx, node, tenant, a.Record.ID, "stderr", a.Large.Stderr); err != nil {
		return err
	}
	a.Record.Result, a.Large = &res, nil
	return nil
}

func (n *Node) fetchOutput(ctx context.Context, node, tenant, id, stream string, size int) ([]byte, error) {
	out := make([]byte, 0, size)
	for len(out) < size {
		b, _ := json.Marshal(partRequest{Tenant: tenant, ID: id, Stream: stream, Offset: len(out), Len: min(size-len(out), n.maxMessage())})
		m, err := n.nc.RequestWithContext(ctx, nodePrefix+node+".part", b)
		if err != nil {
			return nil, sandbox.Wrap(unavailable, err, "node %s, which holds the record, did not send its %s", node, stream)
		}
		if e := m.Header.Get(hdrPartError); e != "" || len(m.Data) == 0 {
			return nil, sandbox.Errorf(unavailable, "", "node %s could not send the %s of %s: %s", node, stream, id, e)
		}
		out = append(out, m.Data...)
	}
	if len(out) != size {
		return nil, sandbox.Errorf(sandbox.BackendFailure, "", "node %s sent %d bytes of the %s of %s, not %d", node, len(out), stream, id, size)
	}
	return out, nil
}

// answerPart sends a piece of a record's output this node holds.
func (n *Node) answerPart(ctx context.Context, ex Executor, m *nats.Msg) {
	reply := nats.NewMsg(m.Reply)
	refuse := func(why string) {
		reply.Header.Set(hdrPartError, why)
		_ = m.RespondMsg(reply)
	}
	var req partRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Offset < 0 || req.Len <= 0 || req.Len > n.maxMessage() {
		refuse("unreadable part request")
		return
	}
	rec, err := ex.Record(ctx, req.Tenant, req.ID, 0)
	if err != nil || rec.Result == nil {
		refuse(fmt.Sprint("no such record: ", err))
		return
	}
	var data []byte
	switch req.Stream {
	case "stdout":
		data = rec.Result.Stdout
	case "stderr":
		data = rec.Result.Stderr
	default:
		refuse("no stream " + strconv.Quote(req.Stream))
		return
	}
	if req.Offset+req.Len > len(data) {
		refuse(fmt.Sprintf("bytes %d+%d of a %d-byte %s", req.Offset, req.Len, len(data), req.Stream))
		return
	}
	reply.Data = data[req.Offset : req.Offset+req.Len]
	_ = m.RespondMsg(reply)
}
