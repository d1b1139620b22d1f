#!/bin/sh
# Installs the OCI runtimes for the container and gvisor backends on Debian 12.
# runsc comes from bookworm-backports (the 2022 bookworm build lacks systrap and
# breaks `ls -l`); the backports suite is added from the same mirror that the
# existing apt sources use. Idempotent (it does nothing once the backports
# runsc is installed); run as root by scripts/install-deps before apt.
set -eu
export DEBIAN_FRONTEND=noninteractive
case "$(dpkg-query -W -f='${Version}' runsc 2>/dev/null || true)" in
*bpo12*) exit 0 ;;
esac

mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] || continue
	# deb822: take the URIs of a stanza whose Suites include plain "bookworm".
	mirror=$(awk '
		/^[[:space:]]*$/ { if (suite && uri) { print uri; exit } suite=0; uri="" ; next }
		/^URIs:/ { uri=$2 }
		/^Suites:/ { for (i=2;i<=NF;i++) if ($i=="bookworm") suite=1 }
		END { if (suite && uri) print uri }' "$f" | head -n1)
	[ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
	mirror=$(awk '$1=="deb" && $3=="bookworm" { print $2; exit }' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
	echo "oci deps: no bookworm mirror found in apt sources" >&2
	exit 1
fi
list=/etc/apt/sources.list.d/wovyr-bookworm-backports.list
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
	echo "deb $mirror bookworm-backports main" >"$list"
fi
apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
apt-get -o DPkg::Lock::Timeout=300 install -y -qq -t bookworm-backports runsc >&2
