#!/usr/bin/env bash
# build-image.sh [TAG] — builds deploy/Containerfile (the CPU runtime image)
# with the first container builder found: podman, buildah, docker.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-specd:latest}
for b in podman buildah docker; do
  command -v "$b" >/dev/null 2>&1 || continue
  case $b in
    buildah) exec buildah bud --layers -f deploy/Containerfile -t "$TAG" . ;;
    *) exec "$b" build -f deploy/Containerfile -t "$TAG" . ;;
  esac
done
echo "build-image: no container builder (podman, buildah or docker) found; Debian: apt-get install buildah" >&2
exit 1
