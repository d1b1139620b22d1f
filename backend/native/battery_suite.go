package native

import "github.com/wovyr/wovyr/battery"

// Suite is the battery for the native backend. guest is the host path of
// the static wovyr-guest binary; it must be executable by any uid.
//
// Native is for trusted code only, so it is certified for what a process
// sandbox promises — limits, a private workspace, a scrubbed environment,
// no network, separate tenants, total cleanup — and the record says which
// rows do not apply and why.
func Suite(b *Backend, guest string) battery.Suite {
	const (
		sharedView = "native shares the host's mount, pid, ipc and uts namespaces by design (trusted code only); it promises no filesystem or process-table isolation"
		kernel     = "native applies no syscall filter (trusted code only); the process is unprivileged with no capabilities and no_new_privs (row 1)"
		noNet      = "native sandboxes have an empty network namespace and refuse allowlists (Capability.Egress=false); every egress row reduces to row 70"
		noSnap     = "native has no snapshot/restore and sandboxes are single-use (residue across tenants: rows 48 and 60)"
	)
	na := map[int]string{
		6:  "native has no runtime flags or VMM to lint",
		46: sharedView,
		56: "per-uid pipe, inotify and mqueue limits are the host's; native is certified for the limits of rows 50-55",
		57: "threads count against pids.max (row 50); stack depth is the process's own",
		59: noNet,
	}
	for _, id := range []int{2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15} {
		na[id] = sharedView
	}
	for id := 20; id <= 43; id++ {
		na[id] = kernel
	}
	for id := 71; id <= 84; id++ {
		na[id] = noNet
	}
	for id := 85; id <= 92; id++ {
		na[id] = noSnap
	}
	return battery.Suite{
		Target:        battery.Target{Backend: b, Guest: []string{guest, "probe"}},
		Probes:        battery.ProcessProbes("native"),
		NotApplicable: na,
	}
}
