package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/wovyr/wovyr/battery"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/wovyr/wovyr/sandbox"
)

func lines(res *sandbox.Result) string {
	return strings.TrimSpace(strings.ReplaceAll(string(res.Stdout), "\n", "; "))
}

var probeMemory = Probe{
	ID: 51, Name: "memory exhaustion",
	weakness: battery.NoMemoryLimit,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		const limit = 4 << 20
		g := newWat()
		g.code(`(block $full (loop $l
      (br_if $full (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
      (br_if $l (i32.lt_u (memory.size) (i32.const 65535)))))`)
		g.call("grow_failed_at_pages", "(memory.size)")
		res, err := e.runWat(ctx, g.module(), &sandbox.Invocation{Limits: sandbox.Limits{Memory: limit}})
		if err != nil {
			return failed(err)
		}
		pages, _ := strconv.Atoi(guestLines(res.Stdout)["grow_failed_at_pages"])
		ok := ran(res) && pages*65536 <= limit && pages > 0
		return "memory.grow one page at a time under a 4 MiB limit", fmt.Sprintf("%s (peak %d bytes)", lines(res), res.Usage.PeakMemory), ok
	},
}

// fillGuest writes 64 KiB chunks to /workspace/fill until a write fails or twice
// the quota is written; it prints the bytes written and the errno.
func fillGuest(stopAt int) string {
	g := newWat()
	g.code(`(drop (call $path_open (i32.const 3) (i32.const 0) %s (i32.const 1) (i64.const 66) (i64.const 0) (i32.const 0) (i32.const 64)))`, g.str("fill"))
	g.code(`(i32.store (i32.const 80) (i32.const 65536)) (i32.store (i32.const 84) (i32.const 65536))
    (block $done (loop $l
      (local.set $e (call $fd_write (i32.load (i32.const 64)) (i32.const 80) (i32.const 1) (i32.const 88)))
      (br_if $done (local.get $e))
      (br_if $done (i32.eqz (i32.load (i32.const 88))))
      (local.set $n (i32.add (local.get $n) (i32.load (i32.const 88))))
      (br_if $l (i32.lt_u (local.get $n) (i32.const %d)))))`, stopAt)
	g.call("written", "(local.get $n)")
	g.call("errno", "(local.get $e)")
	return strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $n i32) (local $e i32)`, 1)
}

var probeDisk = Probe{
	ID: 52, Name: "disk exhaustion",
	weakness: battery.NoDiskQuota,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		const quota = 2 << 20
		res, err := e.runWat(ctx, fillGuest(2*quota), withWork(&sandbox.Invocation{Limits: sandbox.Limits{Disk: quota}}))
		if err != nil {
			return failed(err)
		}
		m := guestLines(res.Stdout)
		n, _ := strconv.Atoi(m["written"])
		ok := ran(res) && n <= quota && m["errno"] == strconv.Itoa(eNospc)
		return "write /workspace/fill until failure under a 2 MiB disk limit", lines(res), ok
	},
}

var probeInodes = Probe{
	ID: 53, Name: "inode exhaustion",
	weakness: battery.NoDiskQuota,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		const quota = 1 << 20
		bound := int(inodes(quota))
		g := newWat()
		// names f0000.. in a 5-byte buffer at 12000: "f" + 4 digits
		g.code(`(i32.store8 (i32.const 12000) (i32.const 102))
    (block $done (loop $l
      (i32.store8 (i32.const 12001) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $n) (i32.const 1000)) (i32.const 10))))
      (i32.store8 (i32.const 12002) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $n) (i32.const 100)) (i32.const 10))))
      (i32.store8 (i32.const 12003) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $n) (i32.const 10)) (i32.const 10))))
      (i32.store8 (i32.const 12004) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const 12000) (i32.const 5) (i32.const 1) (i64.const 66) (i64.const 0) (i32.const 0) (i32.const 64)))
      (br_if $done (local.get $e))
      (drop (call $fd_close (i32.load (i32.const 64))))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const %d)))))`, 2*bound)
		g.call("created", "(local.get $n)")
		g.call("errno", "(local.get $e)")
		src := strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $n i32) (local $e i32)`, 1)
		res, err := e.runWat(ctx, src, withWork(&sandbox.Invocation{Limits: sandbox.Limits{Disk: quota}}))
		if err != nil {
			return failed(err)
		}
		m := guestLines(res.Stdout)
		n, _ := strconv.Atoi(m["created"])
		ok := ran(res) && n <= bound && m["errno"] == strconv.Itoa(eNospc)
		return fmt.Sprintf("create files in /workspace until failure (bound %d inodes)", bound), lines(res), ok
	},
}

var probeFDs = Probe{
	ID: 54, Name: "descriptor exhaustion",
	// Control: directory grants run in-process, where nothing bounds the
	// guest's descriptors but the whole process's limit.
	weakness: WeakNoFDBound,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.workBackend(); err != nil {
			return failed(err)
		}
		nofile := sandbox.DefaultNoFile
		stop := 4 * nofile
		g := newWat()
		g.code(`(block $done (loop $l
      (local.set $e (call $path_open (i32.const 3) (i32.const 0) %s (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 64)))
      (br_if $done (local.get $e))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const %d)))))`, g.str("probe.txt"), stop)
		g.call("opened", "(local.get $n)")
		g.call("errno", "(local.get $e)")
		src := strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $n i32) (local $e i32)`, 1)
		res, err := e.runWat(ctx, src, e.work(nil))
		if err != nil {
			return failed(err)
		}
		m := guestLines(res.Stdout)
		n, _ := strconv.Atoi(m["opened"])
		// Near the bound (the preopen itself counts), and an error saying
		// so: Wasmtime's preview1 reports the host's EMFILE as errno io.
		errno, _ := strconv.Atoi(m["errno"])
		ok := ran(res) && n <= nofile && n >= nofile-fdSlack && (errno == eMfile || errno == eNfile || errno == eIO)
		return fmt.Sprintf("open %s/probe.txt repeatedly (stop at %d); want EMFILE (or io) at Limits.NoFile=%d", e.workGuest(), stop, nofile), lines(res), ok
	},
}

// fdSlack is how far below Limits.NoFile the guest may meet EMFILE: its
// preopened directories hold descriptors too.
const fdSlack = 8

var probeSpin = Probe{
	ID: 55, Name: "cpu spin",
	// Control: no epoch deadline; fuel stops the guest instead.
	weakness: battery.NoDeadline,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		b, err := e.backend()
		if err != nil {
			return failed(err)
		}
		const wall = 200 * time.Millisecond
		in := &sandbox.Invocation{Limits: sandbox.Limits{Wall: wall, Fuel: 1_000_000_000}}
		res, err := e.runWat(ctx, `(module (func (export "_start") (loop $l (br $l))))`, in)
		if err != nil {
			return failed(err)
		}
		over := res.Usage.Wall - wall
		// The bound is loose for loaded machines; BenchmarkDeadlineOvershoot
		// measures the real overshoot (about half a tick).
		ok := res.Class == sandbox.Timeout && over >= 0 && over < time.Second
		return fmt.Sprintf("(loop br 0) with no imports, wall %s, epoch tick %s", wall, b.cfg.EpochTick),
			fmt.Sprintf("class %q after %s (%s past the deadline)", res.Class, res.Usage.Wall, over), ok
	},
}

var probeOutputFlood = Probe{
	ID: 58, Name: "output flood",
	weakness: battery.NoOutputCap,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		const cap = 1 << 20
		g := newWat()
		g.code(`(i32.store (i32.const 80) (i32.const 65536)) (i32.store (i32.const 84) (i32.const 131072))
    (loop $l
      (drop (call $fd_write (i32.const 1) (i32.const 80) (i32.const 1) (i32.const 88)))
      (drop (call $fd_write (i32.const 2) (i32.const 80) (i32.const 1) (i32.const 88)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const 640))))`) // 80 MiB per stream
		src := strings.Replace(g.module(), `(func (export "_start")`, `(func (export "_start") (local $n i32)`, 1)
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := e.runWat(ctx, src, &sandbox.Invocation{Limits: sandbox.Limits{Output: cap}})
		if err != nil {
			return failed(err)
		}
		ok := len(res.Stdout) <= cap && len(res.Stderr) <= cap && res.StdoutTruncated && res.StderrTruncated && res.Class == sandbox.OK
		return "80 MiB to stdout and to stderr with a 1 MiB cap",
			fmt.Sprintf("kept %d/%d bytes, truncated %v/%v, class %q", len(res.Stdout), len(res.Stderr), res.StdoutTruncated, res.StderrTruncated, res.Class), ok
	},
}

var probeAmbient = Probe{
	ID: 66, Name: "no ambient authority",
	weakness: battery.InheritEnv,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.backend(); err != nil {
			return failed(err)
		}
		argv := []string{"probe66", "a b", ""}
		env := []string{"ONLY=this"}
		g := newWat()
		g.code(`(drop (call $args_sizes_get (i32.const 128) (i32.const 132)))
    (drop (call $args_get (i32.const 28672) (i32.const 24576)))
    (call $dump %s (i32.load (i32.const 132)))
    (drop (call $environ_sizes_get (i32.const 128) (i32.const 132)))
    (drop (call $environ_get (i32.const 28672) (i32.const 24576)))
    (call $dump %s (i32.load (i32.const 132)))
    (call $preopens)`, g.str("args"), g.str("env"))
		for fd := 0; fd <= 5; fd++ {
			g.call(fmt.Sprintf("sock_accept.%d", fd), fmt.Sprintf("(call $sock_accept (i32.const %d) (i32.const 0) (i32.const 96))", fd))
		}
		g.call("clock", "(call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 104))")
		g.call("clock_s", "(i32.wrap_i64 (i64.div_u (i64.load (i32.const 104)) (i64.const 1000000000)))")
		g.call("random", "(call $random_get (i32.const 112) (i32.const 16))")
		g.call("random2", "(call $random_get (i32.const 128) (i32.const 16))")
		g.call("random_differs", "(i32.or (i64.ne (i64.load (i32.const 112)) (i64.load (i32.const 128))) (i64.ne (i64.load (i32.const 120)) (i64.load (i32.const 136))))")
		res, err := e.runWat(ctx, g.module(), &sandbox.Invocation{Workload: sandbox.Workload{Argv: argv, Env: env}})
		if err != nil {
			return failed(err)
		}
		out := string(res.Stdout)
		m := guestLines(res.Stdout)
		var bad []string
		if !strings.Contains(out, "args<"+strings.Join(argv, "\x00")+"\x00>") {
			bad = append(bad, "argv differs")
		}
		if !strings.Contains(out, "env<"+strings.Join(env, "\x00")+"\x00>") {
			bad = append(bad, "ENV DIFFERS FROM WHAT WAS GIVEN")
		}
		// The one directory is the invocation's own empty workspace (none
		// unprivileged): nothing of the host's without a grant.
		want := "preopen=" + workspaceGuest
		if e.cfg.Unprivileged {
			want = ""
		}
		if got := strings.Join(preopenLines(out), ";"); got != want {
			bad = append(bad, fmt.Sprintf("a directory was preopened without a grant (preopens %q, want %q)", got, want))
		}
		for fd := 0; fd <= 5; fd++ {
			if m[fmt.Sprintf("sock_accept.%d", fd)] == "0" {
				bad = append(bad, "sock_accept succeeded")
			}
		}
		clock, _ := strconv.ParseInt(m["clock_s"], 10, 64)
		if m["clock"] != "0" || abs64(clock-time.Now().Unix()) > 60 {
			bad = append(bad, "clock is not the real clock")
		}
		if m["random"] != "0" || m["random_differs"] != "1" {
			bad = append(bad, "random_get is not random")
		}
		obs := strings.ReplaceAll(lines(res), "\x00", "\\0")
		if len(bad) > 0 {
			obs = strings.Join(bad, ", ") + ": " + obs
		}
		return "read args, env, preopens; sock_accept on fds 0-5; clock_time_get; random_get twice", obs, ran(res) && len(bad) == 0
	},
}

// preopenLines are the guest's "preopen=NAME" lines ($preopens).
func preopenLines(out string) []string {
	var ps []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "preopen=") {
			ps = append(ps, l)
		}
	}
	return ps
}

// lastLine is the cause at the end of a Wasmtime error (after the backtrace).
func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(ls[len(ls)-1])
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// certifiedStack is the wasm stack budget the battery certifies (twice
// Wasmtime's 512 KiB default); a config above it is reported.
const certifiedStack = 1 << 20

var probeStackOverflow = Probe{
	ID: 67, Name: "stack overflow",
	// Control: a wasm stack above the certified budget.
	weakness: WeakBigStack,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		b, err := e.backend()
		if err != nil {
			return failed(err)
		}
		// Each frame keeps one i64 live across the call; depth is printed
		// every 1024 levels.
		g := newWat()
		rec := fmt.Sprintf(`(func $rec (param $d i32) (result i64)
    (if (i32.eqz (i32.and (local.get $d) (i32.const 1023))) (then (call $kv %s (local.get $d))))
    (i64.add (i64.extend_i32_u (local.get $d)) (call $rec (i32.add (local.get $d) (i32.const 1)))))`, g.str("depth"))
		g.code("(drop (call $rec (i32.const 1)))")
		res, err := e.runWat(ctx, g.module(rec), nil)
		if err != nil {
			return failed(err)
		}
		ls := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		depth, _ := strconv.Atoi(strings.TrimPrefix(ls[len(ls)-1], "depth="))
		stack := b.engine.Config().MaxWasmStack
		follow := e.b.Probe(ctx)
		ok := res.Signal == "trap" && strings.HasPrefix(res.Error, "stack-overflow") && follow.Available && stack <= certifiedStack
		first, _, _ := strings.Cut(res.Error, "\n")
		return "unbounded recursion, then a fresh invocation on the same backend",
			fmt.Sprintf("%s after depth ~%d with a %d-byte wasm stack (certified ≤ %d); host alive: %v", first, depth, stack, certifiedStack, follow.Available), ok
	},
}

var probeCompileBomb = Probe{
	ID: 68, Name: "compile bomb",
	// Control: the module size bound is lifted.
	weakness: WeakNoModuleBound,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		b, err := e.backend()
		if err != nil {
			return failed(err)
		}
		var obs []string
		ok := true
		for _, c := range []struct {
			name string
			mod  []byte
			want func(err error) bool
		}{
			{"100k nested blocks", nestedBlocks(100_000), func(err error) bool { return err == nil || errors.Is(err, sandbox.BadInput) }},
			{"50k locals", manyLocals(50_001), func(err error) bool { return errors.Is(err, sandbox.BadInput) }},
			{"module over the size bound", oversized(defaultMaxModule + 1), func(err error) bool { return errors.Is(err, sandbox.BadInput) }},
		} {
			start := time.Now()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := e.runModule(ctx, c.mod, &sandbox.Invocation{Limits: sandbox.Limits{Wall: 5 * time.Second}})
			took := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			good := c.want(err) && took < 30*time.Second
			state := "ran"
			if err != nil {
				state = err.Error()
				if len(state) > 120 {
					state = state[:120] + "…"
				}
			} else if res.Class != sandbox.OK {
				state = string(res.Class)
			}
			obs = append(obs, fmt.Sprintf("%s: %s in %s", c.name, state, took.Round(time.Millisecond)))
			ok = ok && good
		}
		_ = b
		return "compile deeply nested blocks, a function over the locals limit, a module over MaxModuleBytes", strings.Join(obs, "; "), ok
	},
}

const defaultMaxModule = 64 << 20

// nestedBlocks is a module whose _start nests n empty blocks.
func nestedBlocks(n int) []byte {
	body := append([]byte{0x00}, bytes.Repeat([]byte{0x02, 0x40}, n)...)
	body = append(append(body, bytes.Repeat([]byte{0x0b}, n)...), 0x0b)
	return startModule(body)
}

// manyLocals is a module whose _start declares n i64 locals.
func manyLocals(n int) []byte {
	body := append([]byte{0x01}, uleb(uint64(n))...)
	body = append(body, 0x7e, 0x0b)
	return startModule(body)
}

// oversized is a valid module padded with a custom section to n bytes.
func oversized(n int) []byte {
	m := startModule([]byte{0x00, 0x0b})
	name := []byte{0x01, 'x'}
	pad := n - len(m) - 1 - 5 - len(name)
	sec := append([]byte{0x00}, uleb5(uint64(len(name)+pad))...)
	sec = append(append(sec, name...), make([]byte, pad)...)
	return append(m, sec...)
}

// startModule wraps one function body (locals + code) as an exported _start.
func startModule(body []byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00")
	fn := append(uleb(uint64(len(body))), body...)
	code := append([]byte{0x01}, fn...)
	m = append(m, 0x0a)
	m = append(m, uleb(uint64(len(code)))...)
	return append(m, code...)
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
			continue
		}
		return append(out, c)
	}
}

// uleb5 is a fixed 5-byte LEB128 (so a section's size is known in advance).
func uleb5(v uint64) []byte {
	return []byte{byte(v) | 0x80, byte(v>>7) | 0x80, byte(v>>14) | 0x80, byte(v>>21) | 0x80, byte(v >> 28)}
}

var probeHostCalls = Probe{
	ID: 69, Name: "host function abuse",
	weakness: WeakProbeSelf,
	run: func(ctx context.Context, e *probeEnv) (string, string, bool) {
		if _, err := e.workBackend(); err != nil {
			return failed(err)
		}
		// The control passes in-bounds arguments: the same calls succeed,
		// which the probe must report as "not refused".
		bad, huge := "(i32.const -16)", "(i32.const -1)"
		if e.control {
			bad, huge = "(i32.const 20480)", "(i32.const 4)"
		}
		calls := []struct{ name, setup, expr string }{
			{"fd_write.oob_buf", "(i32.store (i32.const 80) " + bad + ") (i32.store (i32.const 84) (i32.const 4))", "(call $fd_write (i32.const 1) (i32.const 80) (i32.const 1) (i32.const 88))"},
			{"fd_write.huge_len", "(i32.store (i32.const 80) (i32.const 20480)) (i32.store (i32.const 84) " + huge + ")", "(call $fd_write (i32.const 1) (i32.const 80) (i32.const 1) (i32.const 88))"},
			{"fd_write.oob_iovs", "", "(call $fd_write (i32.const 1) " + bad + " (i32.const 1) (i32.const 88))"},
			{"args_get.oob", "", "(call $args_get " + bad + " " + bad + ")"},
			{"random_get.oob", "", "(call $random_get " + bad + " (i32.const 64))"},
			{"clock.oob", "", "(call $clock_time_get (i32.const 0) (i64.const 1) " + bad + ")"},
			{"fd_read.oob", "", "(call $fd_read (i32.const 0) " + bad + " (i32.const 1) (i32.const 88))"},
			{"path_open.huge_len", "", "(call $path_open (i32.const 3) (i32.const 0) (i32.const 2048) " + huge + " (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 64))"},
		}
		ok := true
		var obs []string
		for _, c := range calls { // one invocation per call: a trap ends it
			g := newWat()
			if c.setup != "" {
				g.code(c.setup)
			}
			g.call(c.name, c.expr)
			res, err := e.runWat(ctx, g.module(), e.work(nil))
			if err != nil {
				return failed(err)
			}
			errno, done := guestLines(res.Stdout)[c.name], ran(res)
			switch {
			case res.Signal == "trap":
				obs = append(obs, c.name+": trap ("+lastLine(res.Error)+")")
			case done && errno != "0" && errno != "":
				obs = append(obs, c.name+": errno "+errno)
			default:
				ok = false
				obs = append(obs, fmt.Sprintf("%s: NOT REFUSED (errno %q, class %q)", c.name, errno, res.Class))
			}
		}
		alive := e.b.Probe(ctx).Available
		ok = ok && alive
		obs = append(obs, fmt.Sprintf("host alive %v", alive))
		return "WASI calls with out-of-bounds pointers and lengths of 2^32-1", strings.Join(obs, "; "), ok
	},
}
