package battery

import "slices"

// KernelAttempt is one kernel-surface row's attempt (BATTERY.md rows 13,
// 20, 25, 28–36, 38–40): the prober's "sys" or "sweep" arguments, which
// make the row's system calls with arguments invalid only *past* the
// kernel's permission check, so a call that reaches the kernel shows as
// EINVAL/ENOENT/EFAULT or success and a refused one as EPERM/EACCES/ENOSYS.
// The attempts are harmless even host-privileged. Each backend judges
// them its own way: a container must be refused (backend/oci), a microVM's
// guest kernel may serve them but the host's must not (backend/microvm).
type KernelAttempt struct {
	ID    int
	Tried string
	Args  []string // row 28 takes a host pid as one more argument
}

var kernelAttempts = []KernelAttempt{
	{13, "name_to_handle_at on /, open_by_handle_at with it and with Shocker's inode-2 handle", []string{"sys", "shocker"}},
	{20, "CVE-2022-0492: clone a user+mount+cgroup namespace, mount cgroup v1 rdma/misc/memory, rewrite release_agent", []string{"sys", "cgroup-release"}},
	{25, "make a setuid-root copy of the prober, try a file capability on it, exec it and read CapEff", []string{"sys", "setuid"}},
	{28, "ptrace SEIZE, process_vm_readv and kill(0) of a host pid", []string{"sys", "ptrace"}},
	{29, "keyctl GET_KEYRING_ID of @u/@us/@s, add_key, read /proc/keys", []string{"sys", "keyring"}},
	{30, "bpf MAP_CREATE (array) and PROG_LOAD (socket filter)", []string{"sys", "bpf"}},
	{31, "userfaultfd, plain and UFFD_USER_MODE_ONLY", []string{"sys", "userfaultfd"}},
	{32, "io_uring_setup with 4 entries", []string{"sys", "io_uring"}},
	{33, "perf_event_open of a user-only software counter on itself", []string{"sys", "perf"}},
	{34, "init_module, finit_module, socket() of 25 exotic families; host /proc/modules before and after", []string{"sys", "modules"}},
	{35, "kexec_load, reboot, swapon, acct (each invalid past the permission check), syslog SIZE_BUFFER, open /dev/kmsg", []string{"sys", "boot"}},
	{36, "settimeofday (bad tz), adjtimex and clock_adjtime (bad tick), clock_settime (bad nsec)", []string{"sys", "clock"}},
	{38, "AF_PACKET raw/dgram, AF_INET/AF_INET6 SOCK_RAW, SOCK_PACKET", []string{"sys", "raw"}},
	{39, "every syscall number 0..470 with zero arguments in restartable children", []string{"sweep"}},
	{40, "getpid, unshare(0), keyctl through the x32 ABI (nr|0x40000000) and int 0x80", []string{"sys", "x32"}},
}

// KernelAttempts returns every kernel-surface row's attempt.
func KernelAttempts() []KernelAttempt {
	out := slices.Clone(kernelAttempts)
	for i := range out {
		out[i].Args = slices.Clone(out[i].Args)
	}
	return out
}
