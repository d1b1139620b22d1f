// Package sandbox is the contract between wovyr's core and its backends: the
// isolation spectrum (Strength), how far code is trusted (TrustClass), what is
// run (Invocation) and what comes back (Result), and the two interfaces a
// backend implements (Backend, Sandbox).
//
// It holds types and rules only; it starts nothing. Backends live in
// backend/<name>; the only code that turns a Backend into a running Sandbox is
// package manager (and package pool, which it hands a factory), so that the
// isolation floor is checked at exactly one place.
package sandbox
