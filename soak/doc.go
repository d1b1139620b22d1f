// Package soak holds the soak with faults (issue #24): a test that drives
// the real daemon, `wovyr serve`, as a process, and kills it.
package soak
