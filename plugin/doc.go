// Package plugin hosts WebAssembly component plugins: typed functions
// behind WIT interfaces, installed by an operator with a manifest, called
// with JSON arguments mapped to and from their WIT types.
//
// # What a load checks
//
// Everything that can be refused is refused at load, before the plugin is
// installed, so a call never fails for a reason known in advance: the
// component's digest must be the manifest's; a trusted or internal plugin
// needs a manifest signed (ed25519) by a key in the operator's trust store,
// and any signature present must verify; the trust class's floor must
// allow wasm strength (the host runs components in-process) unless the
// host runs such plugins out of process (Config.Isolated); the manifest's
// limits may only lower the host's; every import of the component must be
// granted by the manifest, or the load fails naming the first ungranted
// interface; and the component must instantiate.
//
// # Why imports are gated at load
//
// Wasmtime's C API links WASI 0.2 as a whole (there is no per-interface
// add). A component can call only what it imports, and its imports are
// known from its type before it runs, so refusing a component whose
// imports are not all granted is as strict as linking only the granted
// interfaces, and it fails with the interface's name rather than a trap.
// Granted WASI interfaces reach nothing ambient: each store's WASI context
// is empty (no environment, no arguments, no preopens, empty stdin,
// discarded stdout and stderr). Sockets and wasi:http are not offered.
//
// # Host capabilities
//
// wovyr's own interfaces (wit/host.wit, package wovyr:host) are defined in
// Go and gated the same way (hostcap*.go): log (into the call's result and
// the node's log), kv (the store, private to the tenant and the plugin)
// and http (through an egress slot's proxy under the call's network
// policy; default deny). Each finds the call it serves in its context. A
// component importing one the node cannot provide is refused at load.
// ADR 0036 says why wasi:http is not the interface.
//
// # Compiling
//
// A component is compiled once and sealed in Config.Dir, so a restart
// loads it in milliseconds. A large one's first install compiles quickly
// (unoptimized) and serves calls from that code while the optimized code
// compiles in the background, is sealed, and is swapped in when the
// plugin is idle (tier.go, ADR 0040).
//
// # Battery
//
// Battery runs BATTERY.md's plugin rows (99–105) against the host, each
// with a positive control on a host weakened in that row's one property.
//
// # Instances
//
// A call runs in an instance kept for the calling tenant: its state (a
// counter, a cache) carries to that tenant's next call and never to
// another tenant's. Any call that does not end ok (a trap, fuel, the
// deadline, cancellation) poisons its instance, which is discarded; the
// next call instantiates afresh from the pool. An instance that holds
// resources the plugin returned is pinned to the tenant, and the calls
// that pass their handles run on it (resource.go, ADR 0038).
//
// What it refuses to do: futures and streams in exported signatures
// cannot be called through JSON yet (their functions are listed, and
// calling one is bad-input); it never instantiates a plugin
// whose trust class's floor is above wasm (with Config.Isolated each call
// of such a plugin runs in a sandbox at that floor, isolated.go; without,
// it is refused); and it keeps no state on disk except the
// sealed compiled components in Config.Dir (the daemon's store holds the
// manifests, component bytes and key-value data).
package plugin
