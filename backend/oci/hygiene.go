package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wovyr/wovyr/sandbox"
)

// hostHygiene is row 7's finding for gVisor: what the host offers against
// cross-tenant side channels — SMT, KSM, swap and the kernel's view of CPU
// vulnerabilities. It is host posture, not sandbox configuration: no
// weakened configuration of the backend can change it, so the battery
// records it (NotApplicable's reason) instead of judging a control.
// "Mitigated, or host flagged": every vulnerability that is neither "Not
// affected" nor mitigated is named here, so the record flags the host.
func hostHygiene() string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "unreadable"
		}
		return strings.TrimSpace(string(b))
	}
	swaps := strings.Split(read("/proc/swaps"), "\n")
	swap := "none"
	if len(swaps) > 1 {
		swap = fmt.Sprintf("%d devices", len(swaps)-1)
	}
	var vulnerable []string
	files, _ := filepath.Glob("/sys/devices/system/cpu/vulnerabilities/*")
	for _, f := range files {
		if v := read(f); strings.HasPrefix(v, "Vulnerable") {
			vulnerable = append(vulnerable, filepath.Base(f)+" ("+v+")")
		}
	}
	flag := "host flagged: " + strings.Join(vulnerable, "; ")
	if len(vulnerable) == 0 {
		flag = "all CPU vulnerabilities mitigated or not affected"
	}
	return fmt.Sprintf("host posture, not a sandbox configuration: no weakened configuration can flip it, so it is recorded, not judged; found SMT %s, KSM run=%s, swap %s; %s",
		read("/sys/devices/system/cpu/smt/control"), read("/sys/kernel/mm/ksm/run"), swap, flag)
}

// inotifyBudgetFile is host root's inotify instance budget.
const inotifyBudgetFile = "/proc/sys/fs/inotify/max_user_instances"

// ensureInotifyBudget raises host root's inotify instance budget to at
// least slots × sandbox.DefaultNoFile and returns what it is. The kernel
// charges every object a sandbox creates in its user namespace to that
// namespace's creator too — host root, for every sandbox — so at the
// kernel's default of 128 two sandboxes of one tenant could leave every
// other sandbox on the node without an inotify instance (BATTERY row 56).
// Each sandbox stays bounded by its own descriptor limit, and the
// instances' memory is charged to its memory cgroup. Written only when
// lower; never lowered (ADR 0027).
func ensureInotifyBudget(slots int) (int, error) {
	want := slots * sandbox.DefaultNoFile
	b, err := os.ReadFile(inotifyBudgetFile)
	if err != nil {
		return 0, err
	}
	have, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", inotifyBudgetFile, err)
	}
	if have >= want {
		return have, nil
	}
	if err := os.WriteFile(inotifyBudgetFile, []byte(strconv.Itoa(want)), 0); err != nil {
		return have, fmt.Errorf("raise %s to %d: %w", inotifyBudgetFile, want, err)
	}
	return want, nil
}
