package wasmcapi

import (
	"bytes"
	"strings"
)

// Error is a Wasmtime error. Wasmtime's own text is an anyhow report: a
// headline, a "Caused by:" list whose entries may span lines (its magic
// number check prints each expected and actual byte on a line of its own),
// and sometimes a Rust stack backtrace. That reads as a crash to a person at
// a terminal, so Error() is one line — the headline and the first line of
// each cause, joined with ": " — and Detail keeps the whole report for a
// debug log.
type Error struct {
	Msg    string // one line
	Detail string // Wasmtime's full report
}

func (e *Error) Error() string { return e.Msg }

// Public is Msg: it names no host detail, so it may reach a tenant
// (sandbox.Public).
func (e *Error) Public() string { return e.Msg }

// newError builds an Error from Wasmtime's report.
func newError(report string) *Error {
	return &Error{Msg: oneLine(report), Detail: report}
}

// OneLine is Error.Msg for a report Wasmtime gave through another path
// (the Go wrapper's errors).
func OneLine(report string) string { return oneLine(report) }

// oneLine reduces an anyhow report to its headline and causes, one line.
func oneLine(report string) string {
	report, _, _ = strings.Cut(report, "\nStack backtrace:")
	head, causes, _ := strings.Cut(report, "\nCaused by:\n")
	parts := []string{strings.TrimSpace(firstLine(head))}
	for _, line := range strings.Split(causes, "\n") {
		// A cause starts at four spaces of indentation ("    msg", or
		// "    0: msg" when there are several); deeper lines continue it.
		rest, ok := strings.CutPrefix(line, "    ")
		if !ok || rest == "" || rest[0] == ' ' || rest[0] == ']' || rest[0] == '}' {
			continue
		}
		if i := strings.Index(rest, ": "); i > 0 && isDigits(rest[:i]) {
			rest = rest[i+2:]
		}
		parts = append(parts, strings.Join(strings.Fields(trimDump(rest)), " "))
	}
	var out []string
	for _, p := range parts {
		if p != "" && (len(out) == 0 || out[len(out)-1] != p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

// trimDump drops a value dump that a cause's first line opens and later
// lines continue ("bad magic number - expected=[" → "bad magic number").
func trimDump(s string) string {
	s = strings.TrimSpace(s)
	if !strings.HasSuffix(s, "[") && !strings.HasSuffix(s, "{") && !strings.HasSuffix(s, "(") {
		return s
	}
	if i := strings.LastIndex(s, " - "); i > 0 {
		return s[:i]
	}
	if i := strings.LastIndexAny(s, " ="); i > 0 {
		return strings.TrimRight(s[:i], " =:")
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// wasmMagic opens every WebAssembly binary, module or component.
var wasmMagic = []byte("\x00asm")

// checkMagic answers the commonest wrong input — a file that is not
// WebAssembly at all (a script, a native binary, a .wat text) — in words
// rather than as Wasmtime's byte dump.
func checkMagic(wasm []byte) error {
	if len(wasm) < len(wasmMagic) || !bytes.Equal(wasm[:len(wasmMagic)], wasmMagic) {
		what := "bad magic number"
		switch {
		case bytes.HasPrefix(wasm, []byte("\x7fELF")):
			what = "it is an ELF executable"
		case bytes.HasPrefix(bytes.TrimSpace(wasm), []byte("(module")), bytes.HasPrefix(bytes.TrimSpace(wasm), []byte("(component")):
			what = "it is WebAssembly text (compile it with wat2wasm)"
		}
		return &Error{Msg: "not a WebAssembly module: " + what, Detail: "the first bytes are not \\0asm"}
	}
	return nil
}
