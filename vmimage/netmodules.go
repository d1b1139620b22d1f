package vmimage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

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
	var list strings.Builder
	for _, rel := range order {
		if slices.Contains(base, rel) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(modulesDir, rel))
		if err != nil {
			return fmt.Errorf("vmimage: module: %w", err)
		}
		name := filepath.Base(rel)
		c.File("lib/modules/"+name, 0o644, stripSignature(b))
		list.WriteString(name + "\n")
	}
	c.File("lib/modules/"+NetModuleList, 0o644, []byte(list.String()))
	return nil
}
