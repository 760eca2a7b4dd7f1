#!/usr/bin/env bash
# Builds the node image without a container registry: the Containerfile
# beside this script, with its Debian base made here by debootstrap (the
# same release as debian:bookworm-slim, minbase) and imported into podman,
# and the binaries `make build` left in bin/ (the Containerfile's "prebuilt"
# stage). Everything else, the Debian packages, the users and the files,
# comes from the same Containerfile steps as a registry build.
#
#   deploy/kubernetes/image/build-local.sh [IMAGE]     (default localhost/cellblock-node:dev)
#
# Root, podman and debootstrap (scripts/install-deps.sh cluster installs
# them). The debootstrap tree is cached as a tarball in
# $CELLBLOCK_IMAGE_CACHE (/var/cache/cellblock-image) and the base image is
# kept in podman's store, so a second build only reruns the Containerfile.
set -euo pipefail
cd "$(dirname "$0")/../../.."

image=${1:-localhost/cellblock-node:dev}
suite=bookworm
mirror=${CELLBLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${CELLBLOCK_IMAGE_CACHE:-/var/cache/cellblock-image}
base=localhost/cellblock-base:$suite-minbase

for b in cellblockd cellblock-init cellblock cellblock-mcp; do
	[ -x "bin/$b" ] || { echo "bin/$b is missing: run make build first" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build-local.sh needs root (debootstrap, podman)" >&2; exit 1; }

if ! podman image exists "$base"; then
	tarball=$cache/$suite-minbase.tar
	if [ ! -s "$tarball" ]; then
		mkdir -p "$cache"
		tree=$(mktemp -d "$cache/tree.XXXXXX")
		trap 'rm -rf "$tree"' EXIT
		echo "debootstrap: Debian $suite (minbase) from $mirror" >&2
		debootstrap --variant=minbase "$suite" "$tree" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
			{ tail -20 "$cache/debootstrap.log" >&2; exit 1; }
		# As debian:bookworm-slim is made: packages installed later leave out
		# documentation, manuals and translations.
		printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
			'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
			'path-exclude /usr/share/locale/*' 'path-exclude /usr/share/groff/*' \
			'path-exclude /usr/share/lintian/*' 'path-exclude /usr/share/linda/*' \
			>"$tree/etc/dpkg/dpkg.cfg.d/docker"
		find "$tree"/usr/share/doc -mindepth 2 ! -name copyright ! -type d -delete
		rm -rf "$tree"/usr/share/man/* "$tree"/usr/share/info/* "$tree"/usr/share/locale/* \
			"$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/*
		tar -C "$tree" --numeric-owner -cf "$tarball.tmp" .
		mv "$tarball.tmp" "$tarball"
		rm -rf "$tree"
		trap - EXIT
	fi
	podman import --quiet "$tarball" "$base" >/dev/null
fi

# The build's RUN steps fetch the Debian packages: the host's network.
podman build --quiet --network host --build-arg BASE="$base" --build-arg BINARIES=prebuilt \
	-f deploy/kubernetes/image/Containerfile -t "$image" . >/dev/null
# The image this tag named before, if any, is left without a name: remove it.
podman image prune --force --filter label=org.opencontainers.image.title=cellblock-node >/dev/null
echo "$image"
