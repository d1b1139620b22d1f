package battery

// Shell the snapshot rows (85–90) of every backend that snapshots send
// into a clone: what a later clone of a golden finds of an earlier tenant,
// and which processes it starts with.

// ResidueScan prints "residue:" and every place a battery canary
// ("WOVYR-CANARY-…") shows up: files in the writable places, process argv
// and environments. The pattern is assembled at run time and read from a
// file outside the scanned places, so neither the script's text nor grep's
// argv contains it.
const ResidueScan = `mkdir -p /run; printf '%s\n' "WOVYR-CAN""ARY-" > /run/wovyr-scan
r=$( { grep -rl -f /run/wovyr-scan /workspace /tmp /dev/shm /etc 2>/dev/null; grep -l -f /run/wovyr-scan /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null; } | tr '\n' ' '); echo "residue:$r"`

// ProcNames prints the sorted names of the sandbox's user processes but
// the shell running it: the glob and the reads are the shell's own (no
// fork races), and kernel threads (no exe), which come and go in a guest,
// are left out.
const ProcNames = `l=; for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; [ -e $p/exe ] || continue; read c < $p/comm && l="$l $c"; done; echo $l | tr ' ' '\n' | sort | tr '\n' ' '; echo`
