#!/bin/sh
# Build (and optionally push) the node agent's image from deploy/kubernetes/Dockerfile.agent,
# tagged with the agent's version (fleet_agent/__init__.py), so the DaemonSet's image tag names
# the agent it runs.
#
#   deploy/kubernetes/build-agent-image.sh [--push] [--platform linux/amd64,linux/arm64]
#
# IMAGE (default ghcr.io/example/vllm-fleet-agent) names the repository; BUILDER (default
# docker) may be podman. DRY_RUN=1 prints the commands instead of running them.
# Then set the image in your overlay: images: [{name: ghcr.io/example/vllm-fleet-agent,
# newName: <IMAGE>, newTag: <version>}] (or `kustomize edit set image`).
set -eu
cd "$(dirname "$0")/../.."
IMAGE="${IMAGE:-ghcr.io/example/vllm-fleet-agent}"
BUILDER="${BUILDER:-docker}"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' fleet_agent/__init__.py)"
[ -n "$VERSION" ] || { echo "cannot read __version__ from fleet_agent/__init__.py" >&2; exit 1; }
PUSH=0
PLATFORM=""
while [ $# -gt 0 ]; do
    case "$1" in
        --push) PUSH=1 ;;
        --platform) shift; PLATFORM="$1" ;;
        *) echo "unknown option: $1" >&2; exit 2 ;;
    esac
    shift
done
run() { if [ "${DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi; }
if [ -n "$PLATFORM" ]; then
    # several platforms: buildx builds and pushes them as one manifest list
    [ "$PUSH" = 1 ] || { echo "--platform needs --push (a multi-platform image is pushed)" >&2; exit 2; }
    run "$BUILDER" buildx build --platform "$PLATFORM" -f deploy/kubernetes/Dockerfile.agent \
        -t "$IMAGE:$VERSION" --push .
else
    run "$BUILDER" build -f deploy/kubernetes/Dockerfile.agent -t "$IMAGE:$VERSION" .
    [ "$PUSH" = 0 ] || run "$BUILDER" push "$IMAGE:$VERSION"
fi
echo "$IMAGE:$VERSION"
