// Package snapshot keeps golden snapshots: a warmed, tenant-neutral
// sandbox of one template, captured once and restored into clones, so a
// cold start becomes a restore (DESIGN §9).
//
// What it owns is the part every snapshotting backend shares: the Key that
// says when a golden is still valid (backend, runtime version, kernel,
// config hash, template digest — like a certification, any change voids
// it), the files on disk (one directory per golden, 0700, its files 0600
// and root's, built aside and renamed into place so a crash never leaves a
// half golden that looks whole), invalidation and the start-up reconcile
// that removes what a dead process or an older configuration left, and
// sealed memory: a golden's RAM handed to a VMM as a memfd sealed against
// writes, so no clone — nor its VMM, should a guest take it over — can
// change what later clones start from.
//
// What it does not own: how a backend captures or restores (backend/microvm,
// backend/oci), or when the pool restores instead of preparing (pool).
//
// A golden snapshot never holds tenant state: backends capture it from a
// sandbox no tenant code has run in, and a restored clone is never captured
// again (vmm refuses to save private RAM).
package snapshot
