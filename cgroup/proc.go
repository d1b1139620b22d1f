package cgroup

import (
	"slices"
	"strings"
)

// PathIn returns the cgroup path (with its leading "/") that procCgroup, a
// /proc/<pid>/cgroup text, gives for controller: its v1 hierarchy's line,
// else the unified (v2) line; "" when neither is there.
func PathIn(procCgroup, controller string) string {
	unified := ""
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case slices.Contains(strings.Split(parts[1], ","), controller):
			return parts[2]
		case parts[0] == "0" && parts[1] == "":
			unified = parts[2]
		}
	}
	return unified
}
