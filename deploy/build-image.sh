#!/usr/bin/env bash
# build-image.sh [--local-base] [TAG] — builds deploy/Containerfile (the CPU
# runtime image, default tag specd:latest) with the first container builder
# found: podman, buildah, docker.
#
# --local-base: no registry needed (buildah only). The Debian 12 base image
# is made here — `debootstrap --variant=minbase bookworm` into a scratch
# container, committed as localhost/specd-base:bookworm (reused when it
# exists) — and the build stage and the runtime stage both start from it.
# Needs root (or a user buildah unshare works for), debootstrap and a Debian
# mirror (SPECD_DEBIAN_MIRROR, default http://deb.debian.org/debian). The
# RUN steps are isolated by chroot (BUILDAH_ISOLATION, default chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCAL=0
if [ "${1:-}" = --local-base ]; then LOCAL=1; shift; fi
TAG=${1:-specd:latest}
BASE_TAG=localhost/specd-base:bookworm
MIRROR=${SPECD_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$LOCAL" = 1 ]; then
  command -v buildah >/dev/null 2>&1 || { echo "build-image: --local-base needs buildah (Debian: apt-get install buildah)" >&2; exit 1; }
  if ! buildah inspect --type image "$BASE_TAG" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null 2>&1 || { echo "build-image: --local-base needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
    echo "build-image: making $BASE_TAG with debootstrap from $MIRROR" >&2
    ctr=$(buildah from scratch)
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    mnt=$(buildah mount "$ctr")
    debootstrap --variant=minbase bookworm "$mnt" "$MIRROR" >&2
    rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/*
    buildah umount "$ctr" >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$ctr"
    buildah commit -q "$ctr" "$BASE_TAG" >/dev/null
  fi
  # chroot isolation: RUN steps need no OCI runtime or cgroup setup (which
  # fail in many VMs and containers); BUILDAH_ISOLATION=oci restores it.
  exec buildah bud --layers --isolation "${BUILDAH_ISOLATION:-chroot}" --build-arg BASE="$BASE_TAG" --build-arg RUNTIME_BASE="$BASE_TAG" \
    -f deploy/Containerfile -t "$TAG" .
fi

for b in podman buildah docker; do
  command -v "$b" >/dev/null 2>&1 || continue
  case $b in
    buildah) exec buildah bud --layers -f deploy/Containerfile -t "$TAG" . ;;
    *) exec "$b" build -f deploy/Containerfile -t "$TAG" . ;;
  esac
done
echo "build-image: no container builder (podman, buildah or docker) found; Debian: apt-get install buildah" >&2
exit 1
