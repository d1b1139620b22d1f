package wasm

import (
	"fmt"
	"strings"
)

// watGuest writes the battery's guest programs as WebAssembly text, so that
// `wovyr certify` needs no toolchain: each probe is a short list of raw WASI
// calls whose errno (or read bytes) the guest prints as "label=errno" and
// "label read:<bytes>" lines, ending with "done=0".
type watGuest struct {
	data strings.Builder
	body strings.Builder
	next int // next free string offset
}

// WASI preview1 constants the probes use.
const (
	wasiRead, wasiWrite           = 1 << 1, 1 << 6 // rights
	oCreat, oDirectory, oTrunc    = 1, 2, 8        // oflags
	lookupFollow                  = 1
	eBadf, eNoent, eNospc, eFault = 8, 44, 51, 21
	eMfile, eNfile, eIO           = 33, 41, 29
)

const watPrelude = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_renumber" (func $fd_renumber (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $fd_prestat_dir_name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_symlink" (func $path_symlink (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_link" (func $path_link (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_unlink_file" (func $path_unlink_file (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_rename" (func $path_rename (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_create_directory" (func $path_create_directory (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (memory (export "memory") 4)
  (global $depth (mut i32) (i32.const 0))
  (data (i32.const 1000) "=\n read:<>")
  (func $puts (param $p i32) (param $n i32)
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (local.get $n))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func $putu (param $v i32) (local $i i32)
    (local.set $i (i32.const 48))
    (loop $l
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (local.get $i) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $l (local.get $v)))
    (call $puts (local.get $i) (i32.sub (i32.const 48) (local.get $i))))
  (func $kv (param $p i32) (param $n i32) (param $v i32)
    (call $puts (local.get $p) (local.get $n))
    (call $puts (i32.const 1000) (i32.const 1))
    (call $putu (local.get $v))
    (call $puts (i32.const 1001) (i32.const 1)))
  ;; read_print reads up to 256 bytes of fd and prints "label read:<bytes>".
  (func $read_print (param $lp i32) (param $ln i32) (param $fd i32)
    (i32.store (i32.const 80) (i32.const 16384))
    (i32.store (i32.const 84) (i32.const 256))
    (i32.store (i32.const 88) (i32.const 0))
    (drop (call $fd_read (local.get $fd) (i32.const 80) (i32.const 1) (i32.const 88)))
    (call $puts (local.get $lp) (local.get $ln))
    (call $puts (i32.const 1002) (i32.const 6))
    (call $puts (i32.const 16384) (i32.load (i32.const 88)))
    (call $puts (i32.const 1001) (i32.const 1)))
  ;; try_open opens, prints the errno and, on success, what it reads.
  (func $try_open (param $lp i32) (param $ln i32) (param $dir i32) (param $p i32) (param $n i32)
        (param $oflags i32) (param $rights i64) (param $lookup i32) (result i32) (local $e i32)
    (local.set $e (call $path_open (local.get $dir) (local.get $lookup) (local.get $p) (local.get $n)
      (local.get $oflags) (local.get $rights) (i64.const 0) (i32.const 0) (i32.const 64)))
    (call $kv (local.get $lp) (local.get $ln) (local.get $e))
    (if (i32.eqz (local.get $e)) (then
      (call $read_print (local.get $lp) (local.get $ln) (i32.load (i32.const 64)))
      (drop (call $fd_close (i32.load (i32.const 64))))))
    (local.get $e))
  ;; preopens prints "preopen=<name>" for every preopened fd in 3..63.
  (func $preopens (local $fd i32)
    (local.set $fd (i32.const 3))
    (loop $l
      (if (i32.eqz (call $fd_prestat_get (local.get $fd) (i32.const 128))) (then
        (drop (call $fd_prestat_dir_name (local.get $fd) (i32.const 20480) (i32.load (i32.const 132))))
        (call $puts (i32.const 1024) (i32.const 8))
        (call $puts (i32.const 20480) (i32.load (i32.const 132)))
        (call $puts (i32.const 1001) (i32.const 1))))
      (local.set $fd (i32.add (local.get $fd) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $fd) (i32.const 64)))))
  ;; dump prints "<tag><" + the NUL-separated buffer at 24576 of n bytes + ">".
  (func $dump (param $tp i32) (param $tn i32) (param $n i32)
    (call $puts (local.get $tp) (local.get $tn))
    (call $puts (i32.const 1008) (i32.const 1))
    (call $puts (i32.const 24576) (local.get $n))
    (call $puts (i32.const 1009) (i32.const 1))
    (call $puts (i32.const 1001) (i32.const 1)))
  (data (i32.const 1024) "preopen=")
`

func newWat() *watGuest { return &watGuest{next: 2048} }

// str stores s in a data segment and returns "(i32.const off) (i32.const len)".
func (g *watGuest) str(s string) string {
	off, n := g.strAt(s)
	return fmt.Sprintf("(i32.const %d) (i32.const %d)", off, n)
}

// strAt stores s in a data segment and returns its offset and length.
func (g *watGuest) strAt(s string) (int, int) {
	off := g.next
	g.next += len(s) + 1
	if g.next >= 16384 {
		panic("watGuest: strings overflow their region")
	}
	var esc strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&esc, "\\%02x", s[i])
	}
	fmt.Fprintf(&g.data, "  (data (i32.const %d) \"%s\")\n", off, esc.String())
	return off, len(s)
}

// code appends raw WAT to _start.
func (g *watGuest) code(format string, args ...any) {
	fmt.Fprintf(&g.body, "    "+format+"\n", args...)
}

// open tries path_open and prints label=errno (and what it read).
func (g *watGuest) open(label string, dirfd int, path string, oflags int, rights int64, lookup int) {
	g.code("(drop (call $try_open %s (i32.const %d) %s (i32.const %d) (i64.const %d) (i32.const %d)))",
		g.str(label), dirfd, g.str(path), oflags, rights, lookup)
}

// call prints label=errno of one WASI call written as WAT.
func (g *watGuest) call(label, expr string) {
	g.code("(call $kv %s %s)", g.str(label), expr)
}

// module returns the whole guest; _start runs the body then prints done=0.
func (g *watGuest) module(extraFuncs ...string) string {
	done := g.str("done")
	var b strings.Builder
	b.WriteString(watPrelude)
	b.WriteString(g.data.String())
	for _, f := range extraFuncs {
		b.WriteString(f)
		b.WriteByte('\n')
	}
	b.WriteString("  (func (export \"_start\")\n")
	b.WriteString(g.body.String())
	b.WriteString("    (call $kv " + done + " (i32.const 0)))\n)\n")
	return b.String()
}
