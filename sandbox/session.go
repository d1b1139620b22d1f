package sandbox

import (
	"context"
	"time"

	"github.com/wovyr/wovyr/resource"
)

// Session is implemented by sandboxes that can hold a session: one tenant's
// claim kept across many execs in the same live filesystem, with files
// moved in and out between them (package session drives it). A sandbox
// that implements it is used either as a session (Open, then any number of
// Exec and File calls, then Destroy) or for one invocation (Run), never
// both.
//
// # Why one small interface
//
// A session is the invocation contract split in time: the claim (tenant,
// policy, limits) happens once, at Open, and each Exec is one job through
// the same path a Run takes. A backend whose sandboxes already serve
// sequential jobs to an agent (backend/oci) implements it by forwarding.
// Live output rides the context (WithOutput), not this interface;
// background processes (Processes) and pause/resume are seams of their
// own (a Snapshotter of tenant-bound state), not methods every backend
// must stub.
type Session interface {
	// Open claims the sandbox for c, as Run claims it for an invocation:
	// the tenant's limits and network policy are applied now and hold for
	// the session's whole life. It is called once, before any Exec or
	// File; an error means the sandbox must be destroyed.
	Open(ctx context.Context, c *Claim) error
	// Exec runs e in the session's workspace. As with Run, a nil error
	// means it ran and Result says how it ended (Timeout, OOM, …); an
	// error is typed, and a BackendFailure means the session is no longer
	// usable. Every process e started is gone when Exec returns, but for
	// those of background execs (Processes), which it spares. A
	// Background e is BadInput here: Processes.Start starts it.
	Exec(ctx context.Context, e *Exec) (*Result, error)
	// File does one file operation in the workspace, confined to it (no
	// "..", no absolute path, no symlink out of it). A missing file is a
	// NotFound error, a request the workspace cannot satisfy (a directory
	// read as a file) BadInput.
	File(ctx context.Context, op *FileOp) (*FileReply, error)
}

// Claim is what a session's sandbox is claimed for, once, at Open.
type Claim struct {
	ID     string `json:"id"` // the session's id
	Tenant string `json:"tenant"`
	Image  string `json:"image,omitempty"` // empty: the backend's default
	// Limits bound the session: memory, pids, disk, open files and CPU
	// hold for all its execs together (the sandbox's cgroup and the
	// agent's rlimits); Wall and Output are each exec's default and the
	// most one exec may ask for.
	Limits    Limits          `json:"limits"`
	Policy    Policy          `json:"policy"`
	Resources resource.Vector `json:"resources"`
}

// Invocation is c as the invocation whose claim it is: what Select and
// the backend's checks see. It runs nothing (its argv is the shell's no-op).
func (c *Claim) Invocation() *Invocation {
	return &Invocation{ID: c.ID, Tenant: c.Tenant, Limits: c.Limits, Policy: c.Policy, Resources: Resources{Vector: c.Resources},
		Workload: Workload{Kind: KindCommand, Image: c.Image, Argv: []string{"true"}}}
}

// Validate checks c without side effects (as Invocation.Validate).
func (c *Claim) Validate() error {
	if err := c.Invocation().Validate(); err != nil {
		return err
	}
	if c.ID == "" {
		return Errorf(BadInput, "id", "a session needs an id")
	}
	if c.Resources.GPU > 0 {
		// Devices are assigned per invocation by the daemon's scheduler
		// (ADR 0026); a session holding one for its life is later work.
		return Errorf(BadInput, "resources.gpu", "sessions do not take GPUs yet")
	}
	return nil
}

// Exec is one command run in a session.
type Exec struct {
	ID   string   `json:"id,omitempty"` // assigned by the session if empty
	Argv []string `json:"argv"`
	// Env is the complete environment as KEY=VALUE; nothing is inherited,
	// not even from earlier execs.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory, relative to the workspace. Empty means
	// the workspace itself.
	Dir   string `json:"dir,omitempty"`
	Stdin []byte `json:"stdin,omitempty"`
	// Wall is the deadline from start. Zero means the session's
	// Limits.Wall, which is also its ceiling.
	Wall time.Duration `json:"wall,omitempty"`
	// Output caps each of stdout and stderr. Zero means the session's
	// Limits.Output, also its ceiling.
	Output int64 `json:"output,omitempty"`
	// Background starts the command and returns as soon as it runs
	// (Processes.Start): it outlives the exec, and the sweep after later
	// execs spares it, until it exits, is killed (Processes.Kill) or its
	// session ends. A background exec takes no Stdin and no Wall: the
	// session's max lifetime bounds it. False: an ordinary exec, every
	// process of which is gone when it returns.
	Background bool `json:"background,omitempty"`
	// OpenStdin gives a background exec a stdin that stays open for
	// writes while it runs (StdinWriter) until they close it; without it
	// a background exec's stdin is empty.
	OpenStdin bool `json:"open_stdin,omitempty"`
}

// Validate checks e against the session's limits lim (with defaults)
// without side effects, and returns e with its zero limits filled in.
func (e Exec) Validate(lim Limits) (Exec, error) {
	w := Workload{Kind: KindCommand, Argv: e.Argv, Env: e.Env, Stdin: e.Stdin}
	if err := w.validate(); err != nil {
		return e, err
	}
	if e.Dir != "" {
		if err := ValidatePath(e.Dir); err != nil {
			return e, Errorf(BadInput, "dir", "working directory %q: %s", e.Dir, err.(*Error).Msg)
		}
	}
	if e.ID != "" && !ValidTenant(e.ID) {
		return e, Errorf(BadInput, "id", "exec id %q must match %s", e.ID, tenantRE)
	}
	switch {
	case e.Background && len(e.Stdin) > 0:
		return e, Errorf(BadInput, "stdin", "a background exec takes no stdin (open_stdin streams it)")
	case e.OpenStdin && !e.Background:
		return e, Errorf(BadInput, "open_stdin", "only a background exec keeps its stdin open")
	case e.Background && e.Wall != 0:
		return e, Errorf(BadInput, "wall", "a background exec has no wall limit: it runs until it exits, is killed or its session ends")
	case e.Wall < 0 || e.Wall > lim.Wall:
		return e, Errorf(BadInput, "wall", "must be between 0 and the session's wall limit (%s)", lim.Wall)
	case e.Output < 0 || e.Output > lim.Output:
		return e, Errorf(BadInput, "output", "must be between 0 and the session's output limit (%d bytes)", lim.Output)
	}
	if e.Wall == 0 && !e.Background {
		e.Wall = lim.Wall
	}
	if e.Output == 0 {
		e.Output = lim.Output
	}
	return e, nil
}

// FileOpKind names a file operation.
type FileOpKind string

// File operations.
const (
	FileWrite  FileOpKind = "write"  // create or replace Path with Data (parents made)
	FileRead   FileOpKind = "read"   // a regular file's bytes
	FileList   FileOpKind = "list"   // a directory's entries (Path "" or ".": the workspace)
	FileStat   FileOpKind = "stat"   // one entry, symlinks not followed
	FileRemove FileOpKind = "remove" // a file, a symlink or a directory with its contents
	// FileArchive reads a directory (Path "" or ".": the workspace) as a
	// tar archive of its regular files, directories and symlinks, in Data.
	FileArchive FileOpKind = "archive"
	// FileExtract writes the tar archive Data into a directory (made if
	// missing; Path "" or ".": the workspace).
	FileExtract FileOpKind = "extract"
)

// FileOp is one file operation in a session's workspace.
type FileOp struct {
	Op   FileOpKind `json:"op"`
	Path string     `json:"path"`
	Data []byte     `json:"data,omitempty"` // FileWrite only
	Mode uint32     `json:"mode,omitempty"` // FileWrite: permission bits; zero means 0644
	// Max bounds FileRead's bytes (a larger file is BadInput). Zero means
	// MaxFileBytes.
	Max int64 `json:"max,omitempty"`
}

// Validate checks op without side effects.
func (op *FileOp) Validate() error {
	switch op.Op {
	case FileWrite, FileRead, FileStat, FileRemove:
		if err := ValidatePath(op.Path); err != nil {
			return err
		}
	case FileList, FileArchive, FileExtract:
		if op.Path != "" && op.Path != "." {
			if err := ValidatePath(op.Path); err != nil {
				return err
			}
		}
	default:
		return Errorf(BadInput, "op", "unknown file operation %q", op.Op)
	}
	switch {
	case op.Op != FileWrite && op.Mode != 0:
		return Errorf(BadInput, "mode", "only a write carries a mode")
	case op.Op != FileWrite && op.Op != FileExtract && len(op.Data) > 0:
		return Errorf(BadInput, "data", "only a write and an extract carry data")
	case int64(len(op.Data)) > MaxFileBytes:
		return Errorf(BadInput, "data", "a file is at most %d bytes", MaxFileBytes)
	case op.Mode&^0o777 != 0:
		return Errorf(BadInput, "mode", "mode %o has bits beyond 0777", op.Mode)
	case op.Max < 0 || op.Max > MaxFileBytes:
		return Errorf(BadInput, "max", "must be between 0 and %d bytes", MaxFileBytes)
	}
	return nil
}

// FileInfo describes one workspace entry.
type FileInfo struct {
	Path    string    `json:"path"` // relative to the workspace
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	ModTime time.Time `json:"mod_time"`
}

// FileReply is a file operation's answer: Data for FileRead, Entries for
// FileList (sorted by name) and FileStat (one), nothing otherwise.
type FileReply struct {
	Data    []byte     `json:"data,omitempty"`
	Entries []FileInfo `json:"entries,omitempty"`
}
