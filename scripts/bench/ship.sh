#!/usr/bin/env bash
# Shipping one built image, side by side in one run: `docker push` (gzip) against `invoke push --compression zstd`
# to fresh local registries, then a pull of each onto an engine without the image's layers (image removed, build
# cache pruned: BuildKit's cache would otherwise hand the layers back), in alternating order, ROUNDS times.
# Prints one line per step (seconds) and the compressed size each registry stores. Needs the engine the image is in
# (DOCKER_HOST), .ci/registry.sh's docker-registry, skopeo; run as root from the repository root.
#
# Usage: scripts/bench/ship.sh IMAGE [ROUNDS]       e.g. lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
set -euo pipefail

image="${1:?usage: scripts/bench/ship.sh IMAGE [ROUNDS]}" rounds="${2:-2}"
state="$(mktemp -d /var/tmp/dlimages-ship-XXXXXX)"
export REGISTRY_STATE_DIR="$state/registries"
started=()
stop_all() {
    local name
    for name in "${started[@]}"; do bash .ci/registry.sh stop "$name" >/dev/null 2>&1 || true; done
    rm -rf "$state"
}
trap stop_all EXIT
now() { date +%s.%N; }
since() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }
size() { du -sb "$REGISTRY_STATE_DIR/$1/data/docker/registry/v2/blobs" | cut -f1; }
local_id="$(docker image inspect --format '{{.Id}}' "$image")"
docker save --output "$state/image.tar" "$image"  # kept: the pulls remove the image, the next round loads it back

port=5100
for round in $(seq "$rounds"); do
    order=(gzip zstd)
    ((round % 2)) || order=(zstd gzip)
    for kind in "${order[@]}"; do
        port=$((port + 1))
        name="ship-$kind-$round"
        bash .ci/registry.sh start "$name" "$port" >/dev/null
        started+=("$name")
        registry="127.0.0.1:$port"
        docker image inspect "$image" >/dev/null 2>&1 || docker load --input "$state/image.tar" >/dev/null
        start="$(now)"
        if [[ $kind == gzip ]]; then
            docker tag "$image" "$registry/$image" && docker push --quiet "$registry/$image" >/dev/null
            docker rmi --no-prune "$registry/$image" >/dev/null
        else
            invoke push --image "$image" --registry "$registry" --compression zstd --no-sign \
                --report "$state/report.json" --no-engine-setup >/dev/null
        fi
        echo "round $round push $kind $(since "$start") s, stored $(size "$name") bytes"
        digest="$(skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$registry/$image")"
        docker image rm --force "$local_id" >/dev/null
        docker builder prune --all --force >/dev/null
        start="$(now)"
        docker pull --quiet "$registry/${image%%:*}@$digest" >/dev/null
        echo "round $round pull $kind $(since "$start") s"
        [[ "$(docker image inspect --format '{{.Id}}' "$registry/${image%%:*}@$digest")" == "$local_id" ]] \
            || { echo "the pulled image is not $local_id" >&2; exit 1; }
        docker tag "$local_id" "$image"
        docker rmi --no-prune "$registry/${image%%:*}@$digest" >/dev/null  # the pull's name; the image stays tagged
        bash .ci/registry.sh stop "$name" >/dev/null
    done
done
