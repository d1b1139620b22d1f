package vmimage

// NetModules is the NIC driver of a guest whose VM has a network device
// (an egress-enabled microVM): virtio_net, whose dependencies (net_failover,
// failover) modules.dep supplies. The Debian kernel builds all of them as
// modules. They are kept apart from GuestModules, in NetModuleList, because
// the guest loads them only when the host gave it a NIC: a VM without
// network pays nothing for them.
var NetModules = []string{"virtio_net"}

// NetModuleList is the initramfs file listing NetModules' load order (the
// guest side reads the same name: agent.NetModuleList).
const NetModuleList = "net.order"

// writeNetModules adds the NIC driver and its dependencies that the base
// order does not already load, and their list.
func writeNetModules(c *cpioWriter, modulesDir string, base []string) error {
	order, err := ResolveModules(modulesDir, NetModules)
	if err != nil {
		return err
	}
	return writeModules(c, modulesDir, order, base, NetModuleList)
}
