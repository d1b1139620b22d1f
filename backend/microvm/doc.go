// Package microvm is wovyr's strongest backend: each invocation runs in its
// own virtual machine with its own guest kernel, so the boundary is the VMM
// (QEMU's microvm machine, package vmm), not the host kernel's syscall
// surface.
//
// Two protocols, one guest (wovyr-guest init, see package agent):
//
//   - One-shot (Config.Warm false): Prepare only lays out the per-VM
//     directory and scratch disk; Run writes the job to a small job disk,
//     boots the VM sized for the invocation, and reads the reply from the
//     result disk after the guest synced it and powered off. No channel is
//     open while tenant code runs: the VM's only outputs are that disk and a
//     bounded console.
//   - Warm (Config.Warm true, for the pool): Prepare boots the VM and waits
//     until its agent answers a ping on a virtio-serial port (a socketpair on
//     the host); Run sends the job over it, applying the tenant's limits at
//     claim time through a cgroup inside the guest.
//
// The VM boots the microVM image's kernel and initramfs (package vmimage)
// whatever the workload's image; only the read-only root disk differs: the
// image's own for an empty image, else the named template's, built from the
// template's tree on its first use and cached by its digest (disks.go), so
// every template of the node runs on microVM as on container and gVisor.
//
// Either way a sandbox runs one invocation and is then destroyed: there is
// no verified reset of guest memory yet, so nothing implements Resetter.
//
// The probe decides the accelerator by booting a guest: KVM only if a KVM
// guest actually reaches its agent within a timeout (on nodes whose /dev/kvm
// is PVM it hangs), else TCG, which every Result and the capability report
// as accel=tcg. docs/adr/0006-microvm-tcg.md says what TCG means for the
// isolation claim.
//
// Egress (net.go, ADR 0011): without Config.Network a VM has no NIC and any
// allow rule is Unenforceable. With it, a VM that needs a network gets one
// virtio-net device whose host side is a tap inside its own egress slot
// (package egress), handed to QEMU as a descriptor; the guest configures it
// from the kernel command line, and the enforcement — nftables, DNS stub,
// SNI/Host proxy — stays on the host, out of the guest kernel's reach.
// It refuses to run QEMU as root, without its seccomp sandbox, or outside a
// cgroup.
package microvm
