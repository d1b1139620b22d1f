// Package session keeps long-lived sandboxes that an agent works in over
// many steps: one tenant's claim held across many execs in the same live
// filesystem, with files moved in and out between them.
//
// A session is the invocation pipeline split in time. Its backend is
// chosen once, by the same manager.Select as an invocation (the floor rule
// unchanged, sandbox.KindSession picking among backends whose sandboxes
// implement sandbox.Session), and never changes; its sandbox is leased from
// the same pools and claimed once (sandbox.Session.Open), and each exec is
// one job through the path a Run takes. The daemon (package server) does
// selection, admission and leasing and hands Create an Acquire; this package
// owns what comes after: the lifecycle, its durable record (package store),
// the per-tenant view, expiry, and the end of every session.
//
// # Lifecycle
//
// creating → running ⇄ paused → ended, with interrupted reachable from
// creating and running (the table is in state.go). ended carries why: deleted,
// idle-timeout, max-lifetime, create-failed or backend-failure. A session
// the daemon stops under (shutdown, or a crash that Recover finds at the
// next start-up) is interrupted, never silently dropped.
//
// What it refuses to do: show one tenant another's session (its id is
// NotFound byte for byte as a missing one); run two operations of one
// session at once (they are serialised); keep a sandbox whose exec left it
// unreachable (the session ends, backend-failure); move a session to
// another backend. An idle session pauses, its sandbox given back: saved
// whole where the sandbox can be (snapshot.go; resume: snapshot — files and
// processes kept, gVisor), else with its workspace kept on disk (pause.go;
// resume: restart — processes do not survive); the next request resumes it
// on the same backend. Background execs are background.go's.
//
// # Execs and their output
//
// Each exec runs on its own goroutine in its session's turn (Start answers
// once it has the turn, Exec when it ends), its output live in a
// stream.Log that Watch hands to readers, its end recorded in the store
// with the marks of its live chunks, so that a reader after the end
// replays the same chunks (exec.go).
package session
