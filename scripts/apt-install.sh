#!/usr/bin/env bash
# Installs the given Debian packages if any of them is missing.
# Idempotent: when everything is installed it touches neither the network nor apt's lists.
set -euo pipefail

missing=()
for pkg in "$@"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$pkg")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "apt-install: apt-get not found; install these packages by hand: ${missing[*]}" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "apt-install: must run as root to install: ${missing[*]}" >&2
	exit 1
fi

echo "apt-install: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
