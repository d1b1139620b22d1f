package cgroup

import "slices"

// Dirs lists the group's directories: one per controller on v1 (memory,
// pids, cpu, cpuacct, freezer), the single one on v2. Callers that adopt a
// group another program created use it to check membership everywhere.
func (g *Group) Dirs() []string { return slices.Clone(g.dirs) }

// V2Group reports whether the group lives on the unified hierarchy.
func (g *Group) V2Group() bool { return g.v2 }
