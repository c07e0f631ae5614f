#!/usr/bin/env bash
# Cold builds side by side in one run: `invoke build` of the PyTorch CI cell against scripts/bench/naive.Dockerfile
# (the same base and packages, plain pip), alternating, the build cache pruned and the image removed before each,
# ROUNDS times. Prints one line per build (seconds). Needs the engine (DOCKER_HOST) with dlimages/base:debian12
# (`invoke base`); run from the repository root. The host's Debian mirror and CA bundle are read at run time.
#
# Usage: scripts/bench/cold-build.sh [ROUNDS]
set -euo pipefail

rounds="${1:-2}"
cell=(--cuda 12.1 --torch 2.1 --python 3.11 --mirror none)
image=lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
naive=lab/naive-pytorch:bench
read -r mirror security < <(invoke mirrors --json | python3 -c 'import json, sys
host = json.load(sys.stdin)["host"]
print(host["debian"], host["debian_security"])')
ca=/etc/ssl/certs/ca-certificates.crt
now() { date +%s.%N; }
since() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }
cold() {
    docker image rm --force "$image" "$naive" >/dev/null 2>&1 || true
    docker builder prune --all --force >/dev/null
}

for round in $(seq "$rounds"); do
    order=(invoke naive)
    ((round % 2)) || order=(naive invoke)
    for kind in "${order[@]}"; do
        cold
        start="$(now)"
        if [[ $kind == invoke ]]; then
            invoke build "${cell[@]}" >/dev/null
        else
            docker buildx build --load --provenance=false --build-arg "APT_MIRROR=${mirror%/}" \
                --build-arg "APT_SECURITY_MIRROR=${security%/}" --secret "id=pip_ca,src=$ca" --tag "$naive" \
                --file scripts/bench/naive.Dockerfile scripts/bench >/dev/null
        fi
        echo "round $round $kind $(since "$start") s"
    done
done
cold
