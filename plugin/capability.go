package plugin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// grantableWASI are the WASI 0.2 interfaces a manifest may grant. Wasmtime
// links WASI as a whole (wasmtime_component_linker_add_wasip2), so a grant
// is enforced at load instead: a component whose imports are not all
// granted is refused before it is ever instantiated. Every store gets an
// empty WASI context, so a granted interface still reaches nothing ambient:
// no environment variables or arguments, no preopened directories (so
// wasi:filesystem sees no files), stdin empty, stdout and stderr discarded.
// Clocks and randomness are real.
var grantableWASI = map[string]bool{
	"wasi:cli/environment": true, "wasi:cli/exit": true, "wasi:cli/stdin": true,
	"wasi:cli/stdout": true, "wasi:cli/stderr": true,
	"wasi:cli/terminal-input": true, "wasi:cli/terminal-output": true, "wasi:cli/terminal-stdin": true,
	"wasi:cli/terminal-stdout": true, "wasi:cli/terminal-stderr": true,
	"wasi:clocks/monotonic-clock": true, "wasi:clocks/wall-clock": true,
	"wasi:random/random": true, "wasi:random/insecure": true, "wasi:random/insecure-seed": true,
	"wasi:io/error": true, "wasi:io/poll": true, "wasi:io/streams": true,
	"wasi:filesystem/types": true, "wasi:filesystem/preopens": true,
}

// grantableHost are wovyr's own host capabilities (hostcap.go).
var grantableHost = map[string]bool{hostLog: true, hostKV: true, hostHTTP: true}

// splitVersion splits "wasi:random/random@0.2.0" into the interface and
// its version ("" when absent).
func splitVersion(name string) (iface, version string) {
	iface, version, _ = strings.Cut(name, "@")
	return iface, version
}

// grantable says why c cannot be granted, or nil.
func grantable(c string) error {
	iface, version := splitVersion(c)
	switch {
	case grantableWASI[iface] && (version == "" || strings.HasPrefix(version, "0.2.")):
		return nil
	case grantableWASI[iface]:
		return fmt.Errorf("%s: only WASI 0.2 versions are offered", c)
	case grantableHost[iface] && (version == "" || version == hostVersion):
		return nil
	case grantableHost[iface]:
		return fmt.Errorf("%s: this host offers version %s", c, hostVersion)
	case strings.HasPrefix(iface, "wasi:sockets/"):
		return fmt.Errorf("%s is not offered: plugins get no raw sockets (%s is their outgoing HTTP, through the egress policy)", c, hostHTTP)
	case strings.HasPrefix(iface, "wasi:http/"):
		return fmt.Errorf("%s is not offered: %s is plugins' outgoing HTTP, through the egress policy (ADR 0036)", c, hostHTTP)
	}
	return fmt.Errorf("%s is not an interface wovyr offers to plugins", c)
}

// granted reports whether import imp (with its version) is covered by the
// grant list: by its interface name alone or by the exact versioned name.
func granted(imp string, grants []string) bool {
	iface, _ := splitVersion(imp)
	for _, g := range grants {
		if g == imp || g == iface {
			return true
		}
	}
	return false
}

// ErrUngranted is the cause inside the bad-input error of a load refused
// for an import the manifest did not grant; errors.Is finds it.
var ErrUngranted error = sentinel("its manifest does not grant it")

// checkImports refuses the first import of the component that the grant
// list does not cover, naming it.
func checkImports(imports, grants []string) error {
	for _, imp := range imports {
		if !granted(imp, grants) {
			return &sandbox.Error{Class: sandbox.BadInput, Field: "manifest.capabilities",
				Msg: "the component imports " + imp, Err: ErrUngranted}
		}
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }
