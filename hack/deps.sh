#!/usr/bin/env bash
# `make deps`: check that every package of the list (hack/apt-packages.txt unless given) is installed. As root,
# install the missing ones with apt-get (`apt-get update` only then); otherwise print the command and fail.
#   usage: hack/deps.sh [PACKAGE_LIST]
set -euo pipefail
list="${1:-$(dirname "$0")/apt-packages.txt}"

if ! command -v dpkg-query >/dev/null; then
    echo "deps: no dpkg-query, so not Debian: install the equivalents of ${list} yourself, then run make with" \
         "NO_DEPS=1" >&2
    exit 1
fi

mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "${list}")
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "${package}" 2>/dev/null | grep -qx "install ok installed" || missing+=("${package}")
done
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing system packages: ${missing[*]}" >&2
    echo "deps: install them as root, then run make again:" >&2
    echo "  sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}'" >&2
    exit 1
fi
echo "deps: installing ${missing[*]} (from ${list})"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
