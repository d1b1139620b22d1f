package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wovyr/wovyr/netpolicy"
)

// WorkloadKind says what an invocation runs.
type WorkloadKind string

// Workload kinds. A kind runs at its natural strength or at any stronger one
// (a wasm module at gvisor runs through wovyr's wasm runner inside runsc).
const (
	KindCommand   WorkloadKind = "command"   // argv in a root filesystem
	KindWasm      WorkloadKind = "wasm"      // a WASI preview1 core module
	KindComponent WorkloadKind = "component" // a WebAssembly component (later)
	// KindSession is commands run one after another in a long-lived
	// sandbox (package session). It is a kind for Select only: a backend
	// lists it when its sandboxes implement Session, so the floor rule
	// picks among those; no invocation has it, and a session's sandbox is
	// prepared for KindCommand.
	KindSession WorkloadKind = "session"
)

// Input bounds. Anything larger is BadInput: inputs are held in memory and
// recorded, so they must be bounded.
const (
	MaxArgs        = 4096
	MaxArgBytes    = 256 << 10
	MaxEnv         = 1024
	MaxEnvBytes    = 256 << 10
	MaxStdinBytes  = 16 << 20
	MaxFiles       = 256
	MaxFileBytes   = 64 << 20 // all files in, together
	MaxOutputBytes = 64 << 20 // per stream cap ceiling
	MaxInitBytes   = 1024     // a wasm init export's name
	MaxPathBytes   = 4096     // a guest path (PATH_MAX)
)

// Default limits applied where the caller leaves a limit zero. Zero never
// means "unlimited": every workload is bounded.
const (
	DefaultWall   = 30 * time.Second
	DefaultMemory = 256 << 20
	DefaultPids   = 128
	DefaultOutput = 1 << 20
	DefaultNoFile = 256
	DefaultDisk   = 64 << 20
)

// Invocation is one request to run a workload for a tenant.
type Invocation struct {
	ID        string    `json:"id,omitempty"` // assigned by wovyr if empty
	Tenant    string    `json:"tenant"`
	Workload  Workload  `json:"workload"`
	Limits    Limits    `json:"limits"`
	Policy    Policy    `json:"policy"`
	Resources Resources `json:"resources"`
	// Idempotent says the caller accepts that the invocation may run
	// again: in a cluster, if the node running it is lost mid-run, it is
	// retried once on another node of its region (without it, it ends
	// lost). At most MaxIdempotentBytes of module, stdin and files, which
	// the cluster keeps for the retry.
	Idempotent bool `json:"idempotent,omitempty"`
	// GPUs are the devices the scheduler assigned (set by wovyr after
	// placement, never by the client; nil without a GPU). A backend
	// exposes exactly these and nothing else; the workload's and image's
	// NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES never select devices.
	GPUs []GPUDevice `json:"-"`
}

// Workload is what runs.
type Workload struct {
	Kind WorkloadKind `json:"kind"`
	// Image names the root filesystem template for command workloads on
	// container and stronger backends. Empty means the backend's default.
	// Native ignores it (a native process sees the host).
	Image string `json:"image,omitempty"`
	// Module is the wasm module's bytes for KindWasm.
	Module []byte `json:"module,omitempty"`
	// Init names the wasm module's pre-initialisation export (KindWasm):
	// a function of type [] -> [] that the backend runs once per module, in
	// a tenant-neutral instance, before any invocation; every invocation
	// then starts from the memory and globals it left (the Wizer
	// transformation), without running it again. Empty means
	// "wizer.initialize" when the module exports it, else none. A name the
	// module does not export as a function is BadInput.
	Init string `json:"init,omitempty"`
	// Workdir is where a wasm module sees its workspace: the guest path of
	// the read-write preopen holding Files, as `wasmtime run --dir
	// HOST::GUEST` names it. Absolute and clean; "/" makes the workspace
	// the guest's whole filesystem. Empty means WorkspaceDir, the
	// workspace's path on every tier. Only KindWasm takes it.
	Workdir string   `json:"workdir,omitempty"`
	Argv    []string `json:"argv"`
	// Env is the complete environment as KEY=VALUE; nothing is inherited
	// from the host. One addition: a workload that an OCI runtime starts as
	// its container's init (one-shot container and gVisor sandboxes) gets
	// the HOME its template's /etc/passwd names when Env sets none.
	Env   []string `json:"env,omitempty"`
	Stdin []byte   `json:"stdin,omitempty"`
	// Files are written into the workspace before the workload starts.
	Files []File `json:"files,omitempty"`
	// Collect names workspace files returned in Result.Files.
	Collect []string `json:"collect,omitempty"`
}

// File is a file in the workspace. Path is relative to the workspace root,
// clean, and never leaves it.
type File struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
	Mode uint32 `json:"mode,omitempty"` // permission bits; zero means 0644
}

// Limits bound one invocation. A zero field takes the default above; a
// negative one is BadInput.
type Limits struct {
	Wall   time.Duration `json:"wall,omitempty"`   // deadline from start
	CPU    time.Duration `json:"cpu,omitempty"`    // CPU time (zero: only Wall bounds it)
	Memory int64         `json:"memory,omitempty"` // bytes
	Pids   int           `json:"pids,omitempty"`   // processes/threads
	Disk   int64         `json:"disk,omitempty"`   // bytes writable (workspace, file size)
	Fuel   uint64        `json:"fuel,omitempty"`   // wasm fuel (zero: unmetered)
	Output int64         `json:"output,omitempty"` // bytes kept per stream
	NoFile int           `json:"nofile,omitempty"` // open files
}

// WithDefaults returns l with every zero limit set to its default.
func (l Limits) WithDefaults() Limits {
	if l.Wall == 0 {
		l.Wall = DefaultWall
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.Output == 0 {
		l.Output = DefaultOutput
	}
	if l.NoFile == 0 {
		l.NoFile = DefaultNoFile
	}
	if l.Disk == 0 {
		l.Disk = DefaultDisk
	}
	return l
}

// Policy is what the caller demands of the sandbox.
type Policy struct {
	Trust      TrustClass       `json:"trust"`
	Preference Strength         `json:"preference,omitempty"` // "at least this strong"
	Floor      Strength         `json:"floor,omitempty"`      // explicit floor
	Network    netpolicy.Policy `json:"network"`              // zero: deny all egress
	Residency  Residency        `json:"residency,omitzero"`   // where it may run (package residency)
}

// Residency is what the invocation asks of where it runs. The zero value
// asks nothing: the tenant's policy alone decides. It can only narrow what
// the operator's residency policy allows the tenant, never widen it.
type Residency struct {
	// Regions are the regions it may run in. Nil means any the policy
	// allows; an empty list is bad input (it would allow nothing).
	Regions []string `json:"regions,omitempty"`
	// DataClass names a data class of the operator's config (for example
	// "pii-eu"), whose regions the data may be processed in.
	DataClass string `json:"data_class,omitempty"`
	// Labels describe the data (for example "sensitivity": "high"); the
	// operator's policy may read them.
	Labels map[string]string `json:"labels,omitempty"`
}

// RegionRE is the form of region, zone and data class names: they appear
// in NATS subjects and stream names, so they are restricted as tenant names
// are.
const RegionRE = tenantRE

// ValidRegion reports whether name is a usable region, zone or data class
// name (RegionRE).
func ValidRegion(name string) bool { return ValidTenant(name) }

// Validate checks r's shape: region names well formed, none twice, labels
// bounded. What the deployment knows (its regions and data classes) is
// package residency's to check.
func (r Residency) Validate() error {
	const maxRegions, maxLabels, maxLabelBytes = 64, 64, 1024
	bad := func(field, format string, args ...any) error {
		return Errorf(BadInput, "policy.residency."+field, format, args...)
	}
	if len(r.Regions) > maxRegions {
		return bad("regions", "at most %d regions", maxRegions)
	}
	if r.Regions != nil && len(r.Regions) == 0 {
		return bad("regions", "an empty list allows nothing; omit it to ask for no region")
	}
	for i, g := range r.Regions {
		if !ValidRegion(g) {
			return bad(fmt.Sprintf("regions[%d]", i), "region %q must match %s", g, RegionRE)
		}
		if slices.Contains(r.Regions[:i], g) {
			return bad(fmt.Sprintf("regions[%d]", i), "region %q listed twice", g)
		}
	}
	if r.DataClass != "" && !ValidRegion(r.DataClass) {
		return bad("data_class", "data class %q must match %s", r.DataClass, RegionRE)
	}
	if len(r.Labels) > maxLabels {
		return bad("labels", "at most %d labels", maxLabels)
	}
	for k, v := range r.Labels {
		if k == "" || len(k)+len(v) > maxLabelBytes {
			return bad("labels", "a label needs a name, and name and value at most %d bytes together", maxLabelBytes)
		}
	}
	return nil
}

// IsZero reports whether r asks nothing.
func (r Residency) IsZero() bool { return r.Regions == nil && r.DataClass == "" && len(r.Labels) == 0 }

// tenantRE is the form of tenant names and invocation ids, for messages;
// ValidTenant checks it by hand (compiling the bounded repetition cost
// every process 0.2 ms at start-up).
const tenantRE = `^[a-z0-9][a-z0-9_-]{0,62}$`

// ValidTenant reports whether name is a usable tenant name (tenantRE).
// Tenant names end up in cgroup paths, file names and nft table names, so
// they are restricted.
func ValidTenant(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// Validate checks inv without side effects. It returns a BadInput *Error that
// names the offending field.
func (inv *Invocation) Validate() error {
	if !ValidTenant(inv.Tenant) {
		return Errorf(BadInput, "tenant", "tenant %q must match %s", inv.Tenant, tenantRE)
	}
	if inv.ID != "" && !ValidTenant(inv.ID) {
		return Errorf(BadInput, "id", "invocation id %q must match %s", inv.ID, tenantRE)
	}
	if err := inv.Workload.validate(); err != nil {
		return err
	}
	if err := inv.Limits.validate(); err != nil {
		return err
	}
	if !inv.Policy.Trust.Valid() {
		return Errorf(BadInput, "policy.trust", "a trust class is required (trusted, internal, untrusted, hostile)")
	}
	if inv.Policy.Preference != 0 && !inv.Policy.Preference.Valid() {
		return Errorf(BadInput, "policy.preference", "invalid strength %d", int(inv.Policy.Preference))
	}
	if inv.Policy.Floor != 0 && !inv.Policy.Floor.Valid() {
		return Errorf(BadInput, "policy.floor", "invalid strength %d", int(inv.Policy.Floor))
	}
	if err := inv.Policy.Network.Validate(); err != nil {
		var ne *netpolicy.Error
		if errors.As(err, &ne) {
			return &Error{Class: BadInput, Field: ne.Path(), Msg: ne.Msg}
		}
		return Wrap(BadInput, err, "policy.network")
	}
	if err := inv.Policy.Residency.Validate(); err != nil {
		return err
	}
	if inv.Resources.Negative() {
		return Errorf(BadInput, "resources", "resources must not be negative: %s", inv.Resources)
	}
	if n := inv.Workload.payload(); inv.Idempotent && n > MaxIdempotentBytes {
		return Errorf(BadInput, "idempotent", "an idempotent invocation carries at most %d bytes of module, stdin and files (kept for its retry), this one %d", MaxIdempotentBytes, n)
	}
	return nil
}

// MaxIdempotentBytes bounds what an idempotent invocation carries.
const MaxIdempotentBytes = 256 << 10

// payload is the bytes the workload carries besides its argv.
func (w *Workload) payload() int {
	n := len(w.Module) + len(w.Stdin)
	for _, f := range w.Files {
		n += len(f.Data)
	}
	return n
}

func (w *Workload) validate() error {
	switch w.Kind {
	case KindCommand:
		if len(w.Argv) == 0 || w.Argv[0] == "" {
			return Errorf(BadInput, "workload.argv", "argv must name a program")
		}
		if len(w.Module) != 0 {
			return Errorf(BadInput, "workload.module", "a command workload takes no module")
		}
		if w.Init != "" {
			return Errorf(BadInput, "workload.init", "a command workload has no init export")
		}
		if w.Workdir != "" {
			return Errorf(BadInput, "workload.workdir", "a command workload's workspace is %s; workdir places a wasm module's", WorkspaceDir)
		}
	case KindWasm, KindComponent:
		if len(w.Module) == 0 {
			return Errorf(BadInput, "workload.module", "a %s workload needs a module", w.Kind)
		}
		if w.Init != "" && w.Kind != KindWasm {
			return Errorf(BadInput, "workload.init", "only a wasm module has an init export")
		}
		if len(w.Init) > MaxInitBytes || !utf8.ValidString(w.Init) || strings.IndexByte(w.Init, 0) >= 0 {
			return Errorf(BadInput, "workload.init", "the init export's name must be valid UTF-8 without NUL, at most %d bytes", MaxInitBytes)
		}
		if w.Workdir != "" && w.Kind != KindWasm {
			return Errorf(BadInput, "workload.workdir", "a component has no preopened workspace")
		}
		if w.Workdir != "" && !validGuestDir(w.Workdir) {
			return Errorf(BadInput, "workload.workdir", "%q must be an absolute, clean path of valid UTF-8 without NUL, at most %d bytes", w.Workdir, MaxPathBytes)
		}
	case "":
		return Errorf(BadInput, "workload.kind", "a workload kind is required (command, wasm)")
	default:
		return Errorf(BadInput, "workload.kind", "unknown workload kind %q", w.Kind)
	}
	if len(w.Argv) > MaxArgs || totalLen(w.Argv) > MaxArgBytes {
		return Errorf(BadInput, "workload.argv", "argv exceeds %d entries or %d bytes", MaxArgs, MaxArgBytes)
	}
	for _, a := range w.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return Errorf(BadInput, "workload.argv", "argv entries must not contain NUL")
		}
	}
	if len(w.Env) > MaxEnv || totalLen(w.Env) > MaxEnvBytes {
		return Errorf(BadInput, "workload.env", "env exceeds %d entries or %d bytes", MaxEnv, MaxEnvBytes)
	}
	for _, kv := range w.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return Errorf(BadInput, "workload.env", "env entry %q must be KEY=VALUE without NUL", kv)
		}
	}
	if len(w.Stdin) > MaxStdinBytes {
		return Errorf(BadInput, "workload.stdin", "stdin exceeds %d bytes", MaxStdinBytes)
	}
	if len(w.Files) > MaxFiles {
		return Errorf(BadInput, "workload.files", "more than %d files", MaxFiles)
	}
	total := 0
	for _, f := range w.Files {
		if err := ValidatePath(f.Path); err != nil {
			return Errorf(BadInput, "workload.files", "file %q: %v", f.Path, err)
		}
		if f.Mode&^0o777 != 0 {
			return Errorf(BadInput, "workload.files", "file %q: mode %o has bits beyond 0777", f.Path, f.Mode)
		}
		total += len(f.Data)
	}
	if total > MaxFileBytes {
		return Errorf(BadInput, "workload.files", "files exceed %d bytes together", MaxFileBytes)
	}
	for _, p := range w.Collect {
		if err := ValidatePath(p); err != nil {
			return Errorf(BadInput, "workload.collect", "path %q: %v", p, err)
		}
	}
	return nil
}

func (l *Limits) validate() error {
	switch {
	case l.Wall < 0:
		return Errorf(BadInput, "limits.wall", "must not be negative")
	case l.CPU < 0:
		return Errorf(BadInput, "limits.cpu", "must not be negative")
	case l.Memory < 0:
		return Errorf(BadInput, "limits.memory", "must not be negative")
	case l.Pids < 0:
		return Errorf(BadInput, "limits.pids", "must not be negative")
	case l.Disk < 0:
		return Errorf(BadInput, "limits.disk", "must not be negative")
	case l.Output < 0:
		return Errorf(BadInput, "limits.output", "must not be negative")
	case l.Output > MaxOutputBytes:
		return Errorf(BadInput, "limits.output", "must be at most %d bytes", MaxOutputBytes)
	case l.NoFile < 0:
		return Errorf(BadInput, "limits.nofile", "must not be negative")
	case l.Memory != 0 && l.Memory < 1<<20:
		return Errorf(BadInput, "limits.memory", "must be at least 1 MiB")
	}
	return nil
}

// ValidatePath checks a workspace-relative path: non-empty, relative, clean,
// no "..". Symlink escapes are the backend's to refuse when it touches files.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return Errorf(BadInput, "path", "empty path")
	case strings.HasPrefix(p, "/"):
		return Errorf(BadInput, "path", "absolute path")
	case strings.IndexByte(p, 0) >= 0:
		return Errorf(BadInput, "path", "NUL in path")
	case path.Clean(p) != p:
		return Errorf(BadInput, "path", "path is not clean (want %q)", path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return Errorf(BadInput, "path", "path leaves the workspace")
	case p == ".":
		return Errorf(BadInput, "path", "path names the workspace itself")
	}
	return nil
}

func totalLen(ss []string) int {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	return n
}

// NewID returns a fresh random identifier usable as an invocation or
// sandbox id (it matches the tenant/id pattern).
func NewID() string {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("sandbox: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// validGuestDir reports whether p can name a directory a wasm guest is
// granted: absolute, clean ("/" included), valid UTF-8 without NUL, at most
// MaxPathBytes.
func validGuestDir(p string) bool {
	return len(p) <= MaxPathBytes && path.IsAbs(p) && path.Clean(p) == p &&
		utf8.ValidString(p) && strings.IndexByte(p, 0) < 0
}

// GuestWorkdir is where w's workspace appears to a wasm guest.
func (w *Workload) GuestWorkdir() string {
	if w.Workdir == "" {
		return WorkspaceDir
	}
	return w.Workdir
}
