// Package probecache keeps backends' probe answers between processes.
//
// A backend's probe is real work — it starts a container, boots a VM, runs
// a module — so that an answer says the backend works, not that a binary
// exists. A daemon probes once and lives for days; a one-shot `wovyr run`
// would pay every probe on every call. The manager therefore stores each
// answer with a Key that digests everything the answer depends on, and
// reuses it only while a fresh Key of the backend is the same.
//
// # What a key covers
//
// A key is cheap to compute: it stats files and hashes configuration, and
// runs nothing. Every key covers the running wovyr executable (a new build
// may probe differently) and the effective uid; the backend adds the
// binaries its probe runs and its configuration. A file is identified by
// its path, size, mode, modification and change times (nanoseconds) and
// inode: a package upgrade, a rebuild, a copy or a chmod each changes one
// of them, so the version a probe read from a runtime (`crun --version`)
// is the version of the very file the key names. The manager adds the
// kernel release and an age limit.
//
// What it does not cover: state no file shows (a device that went away, a
// library beside a dynamically linked runtime). A cached "available" then
// fails at Prepare as a backend failure — it never selects a weaker
// backend — and `wovyr backends --probe` or the age limit refreshes it.
// Nothing here bears on certification: the manager checks the certified
// key (runtime version, kernel, config hash) against the capability as
// before, and the cache can only hand it the answer of a real probe of the
// same files.
package probecache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

// Record is one backend's probe answer and what it was keyed by.
type Record struct {
	Backend string `json:"backend"`
	// Key is the backend's Key when the probe ran (see KeyBuilder).
	Key string `json:"key"`
	// Kernel is the node's kernel release when the probe ran.
	Kernel     string             `json:"kernel"`
	Capability sandbox.Capability `json:"capability"`
	// At is when the probe ran.
	At time.Time `json:"at"`
	// Took is how long the probe ran.
	Took time.Duration `json:"took"`
}

// KeyBuilder digests what a probe's answer depends on. The zero value is
// not usable; start with NewKey.
type KeyBuilder struct {
	h hash.Hash
}

// NewKey starts a key for backend. It covers the running executable and the
// effective uid already.
func NewKey(backend string) *KeyBuilder {
	k := &KeyBuilder{h: sha256.New()}
	k.Add("backend", backend, "euid", os.Geteuid())
	exe, err := os.Executable()
	if err != nil {
		k.Add("executable", err.Error())
	} else {
		k.File(exe)
	}
	return k
}

// Add mixes in values (configuration, names), each in its %v form.
func (k *KeyBuilder) Add(parts ...any) *KeyBuilder {
	for _, p := range parts {
		fmt.Fprintf(k.h, "%v\x00", p)
	}
	k.h.Write([]byte{'\n'})
	return k
}

// File mixes in path's identity: path, size, mode, mtime, ctime, inode and
// device — or that it is absent.
func (k *KeyBuilder) File(path string) *KeyBuilder {
	return k.Add("file", Identity(path))
}

// Command mixes in the file the name resolves to on $PATH (as exec would
// run it), or that it resolves to nothing.
func (k *KeyBuilder) Command(name string) *KeyBuilder {
	path, err := exec.LookPath(name)
	if err != nil {
		return k.Add("command", name, "absent")
	}
	return k.Add("command", name).File(path)
}

// String returns the key.
func (k *KeyBuilder) String() string {
	return hex.EncodeToString(k.h.Sum(nil)[:16])
}

// Identity is path's stat identity, stable while the file is unchanged.
// It follows symbolic links and, for an absent or unreadable path, says so.
func Identity(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return path + " absent"
	}
	return fmt.Sprintf("%s size=%d mode=%o mtime=%d.%09d ctime=%d.%09d ino=%d dev=%d",
		path, st.Size, st.Mode, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Ino, st.Dev)
}
