// Package vmimage builds what a wovyr microVM boots: an uncompressed vmlinux
// taken from the distribution's kernel package, an initramfs holding the
// wovyr guest agent as /init plus busybox and the kernel modules the guest
// needs, and the workload's root filesystem as a read-only ext4 disk: the
// image's own (a busybox root) and, through BuildRootDisk, one per template
// of the node's store (the microvm backend caches them by template digest).
//
// # Why an uncompressed vmlinux
//
// QEMU's microvm machine boots an ELF kernel through its PVH entry point,
// skipping the real-mode setup and the in-guest decompressor; under TCG that
// halves the boot (DESIGN §5). The distribution ships only a bzImage, so the
// builder cuts the compressed payload out of it (the boot protocol's
// payload_offset/payload_length) and decompresses it on the host.
//
// # Why ext4 for the root disk
//
// The scratch disk must be a writable filesystem, and ext4 is it, so the
// guest needs the ext4 driver anyway; using ext4 for the read-only root too
// keeps one filesystem driver and one host tool (mkfs.ext4 -d from
// e2fsprogs, which Debian installs everywhere and which needs neither root
// nor a loop device). Read-only is enforced by QEMU (the drive is opened
// readonly=on), not by the guest's mount flags, so a guest that remounts it
// read-write still cannot change the shared image. squashfs or erofs would
// be smaller, but would add a second driver and tool for a gain that does
// not matter for a disk that is only read.
//
// # Why the modules are rewritten
//
// Under TCG, loading the guest's modules was the largest part of wovyr's
// own boot work. The builder strips each module's signature and hides its
// BTF and ORC sections (module.go), which the kernel would otherwise
// verify, parse, relocate and sort at every boot; the guest kernel ends up
// tainted, which a throw-away guest does not mind.
//
// The package refuses to guess: a missing kernel, module or tool is an
// error naming it, never a silently smaller image.
package vmimage
