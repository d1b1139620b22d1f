package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

var errPeeked = errors.New("client hello read")

// peekClientHello reads a TLS ClientHello from c without answering it and
// returns its server name and the bytes consumed, to be replayed upstream.
// TLS is never terminated: the proxy sees only what the client sends in the
// clear. A connection that is not TLS, or names no server, is an error.
func peekClientHello(c net.Conn) (string, []byte, error) {
	var buf bytes.Buffer
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var sni string
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errPeeked
	}}
	err := tls.Server(readOnly{io.TeeReader(c, &buf)}, cfg).Handshake()
	if !errors.Is(err, errPeeked) {
		if err == nil {
			err = errors.New("handshake did not stop at the client hello")
		}
		return "", buf.Bytes(), err
	}
	if sni == "" {
		return "", buf.Bytes(), errors.New("client hello names no server (SNI)")
	}
	return sni, buf.Bytes(), nil
}

// readOnly is a net.Conn that reads from r and refuses writes, so the TLS
// server used for parsing can never send anything to the client.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnly) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }
