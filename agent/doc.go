// Package agent is the small program that runs *inside* a sandbox (a
// container's init, a microVM's init) and executes jobs for the host, plus
// the host-side client that talks to it.
//
// The protocol is deliberately tiny: length-prefixed JSON frames over any
// byte stream (a pipe, a unix socket, a virtio-serial port) or, for the
// one-shot microVM path, a single frame on a block device. The transport is
// the seam: Serve and Client take an io.ReadWriter and know nothing else.
//
// # Why JSON
//
// Jobs are small and bounded (sandbox.Max* limits); JSON keeps the agent a
// dependency-free static binary and frames readable in a hex dump when a guest
// misbehaves. Frames larger than MaxFrame are refused on both sides, so a
// hostile guest cannot make the host allocate without bound.
package agent
