#!/bin/sh
# Installs runsc, the gvisor backend's runtime, built from gVisor's own Go
# module at a pinned commit (ADR 0023). Every Debian build (bookworm's 2022
# one, and 0.0~20240729 in bookworm-backports, trixie and sid) predates
# gVisor's fix for lgetxattr on a symlink (issue #11049, release-20241021.0),
# so `ls -l` of a usr-merge root printed "Bad file descriptor" on gVisor
# only (wovyr issue #25). The version string names the module's commit; it
# is part of the certification key, so a new pin voids gVisor's
# certification. Idempotent: it does nothing once that runsc is installed.
# Run as root by scripts/install-deps before apt; needs only Go.
set -eu
module=gvisor.dev/gvisor
pin=v0.0.0-20260527191743-a81fd9dd382e # the go branch, 2026-05-27
version="go-20260527191743-a81fd9dd382e"
dest=/usr/local/bin
if [ "$("$dest/runsc" --version 2>/dev/null | head -n1)" = "runsc version $version" ]; then
	exit 0
fi
PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "oci deps: go is needed to build runsc" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "oci deps: building runsc $version (a few minutes)" >&2
# Outside any module, with the Go this machine has; static, as gVisor ships it.
(cd "$tmp" && GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= \
	go install -trimpath -ldflags "-s -w -X $module/runsc/version.version=$version" "$module/runsc@$pin") >&2
install -m 0755 "$tmp/runsc" "$dest/runsc.new"
mv -f "$dest/runsc.new" "$dest/runsc"
"$dest/runsc" --version | head -n1 >&2
