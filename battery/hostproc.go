package battery

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HostProcesses counts host processes whose command line contains needle.
func HostProcesses(needle string) int { return len(HostPIDs(needle)) }

// HostPIDs lists host processes whose command line (arguments joined by
// spaces) contains needle, this process excluded.
func HostPIDs(needle string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), needle) {
			pids = append(pids, pid)
		}
	}
	return pids
}
