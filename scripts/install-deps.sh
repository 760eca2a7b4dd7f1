#!/usr/bin/env bash
# Installs what building and testing cellblock needs beyond Go, on Debian or
# Ubuntu: a C compiler and libseccomp for the daemon (cgo), python3 to
# build the default rootfs from, and for the matplotlib tests Debian's
# matplotlib (packed into wheels for a local wheelhouse) and patchelf (to
# point the packed extension modules at the libraries bundled with them);
# for the network tests Debian's requests and httpx, packed the same way;
# for the Python client's tests python3-venv (pip in a fresh venv).
# Fast when everything is there already.
set -euo pipefail

# `install-deps.sh bench` also installs the peers the benchmark compares
# against: bubblewrap and runc.
pkgs=(gcc libc6-dev libseccomp-dev pkg-config python3 ca-certificates python3-matplotlib patchelf python3-requests python3-httpx python3-venv)
[ "${1:-}" = bench ] && pkgs+=(bubblewrap runc)
# `install-deps.sh vm`: qemu, xz and zstd (the kernels' compressions) for the cgroup
# v2 VM test (make vmtest).
[ "${1:-}" = vm ] && pkgs+=(qemu-system-x86 xz-utils zstd)
# `install-deps.sh cluster`: what make clustertest and make image need:
# podman to run the node image, debootstrap to make its Debian base without
# a registry, haproxy for the router, iproute2 for the network namespaces.
[ "${1:-}" = cluster ] && pkgs+=(podman debootstrap haproxy iproute2)
need=()
for pkg in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "cellblock needs these packages: ${need[*]}" >&2
	echo "run as root (sudo make ...) to install them, or: sudo apt-get install ${need[*]}" >&2
	exit 1
fi
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
