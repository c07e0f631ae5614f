#!/usr/bin/env bash
# Prototype: build a minimal Debian 12 root filesystem with mmdebstrap, reproducibly, and
# `docker import` it as the base image that the generated Dockerfiles start FROM.
#
# Usage: scripts/make-base.sh [--tag TAG] [--out DIR] [--epoch SECONDS] [--include PKGS] [--check]
#   --tag      image to import as (default dlimages/base:debian12)
#   --out      where the tarball goes (default .work/base)
#   --epoch    SOURCE_DATE_EPOCH (default 1747699200 = 2025-05-20T00:00:00Z)
#   --include  extra packages, comma-separated (default none: Dockerfiles apt-get install
#              what they need from the same mirror, so the base stays one small layer)
#   --check    build the tarball twice and fail unless both are byte-identical
#   --mirror   Debian mirror URL to bootstrap from (required; `invoke base` reads it from the host's
#              apt sources); the security mirror is URL-security unless --security-mirror is given
#
# The image's own apt sources (deb822, as in the official debian image) name the mirror it was
# bootstrapped from; a mirror profile rewrites them at build time.
#
# The mirror comes in at run time (from the host's apt configuration, via `invoke base`), never written here.
# The tarball is only reproducible while the mirror serves the same package versions: a
# point release or security update changes it. The image ID is not reproducible either,
# because `docker import` stamps the config with the current time; the layer (diff_id) is.
set -euo pipefail

tag=dlimages/base:debian12
out=.work/base
epoch=1747699200
include=""
check=0
mirror=""
security=""
while (($#)); do
    case "$1" in
        --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
        --out) out="${2:?--out needs a value}"; shift 2 ;;
        --epoch) epoch="${2:?--epoch needs a value}"; shift 2 ;;
        --include) include="${2:?--include needs a value}"; shift 2 ;;
        --check) check=1; shift ;;
        --mirror) mirror="${2:?--mirror needs a URL}"; shift 2 ;;
        --security-mirror) security="${2:?--security-mirror needs a URL}"; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) printf 'make-base.sh: unknown argument %q (try --help)\n' "$1" >&2; exit 2 ;;
    esac
done

log() { printf 'make-base.sh: %s\n' "$*"; }
die() { printf 'make-base.sh: error: %s\n' "$*" >&2; exit 1; }

[[ "$epoch" =~ ^[0-9]+$ ]] || die "--epoch must be whole seconds since 1970, got '$epoch'"
[[ $EUID -eq 0 ]] || die "must run as root (mmdebstrap --mode=root)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run .ci/engine.sh first"
docker info >/dev/null 2>&1 || die "no Docker engine answers: run .ci/engine.sh first"

readonly suite=bookworm
# `invoke base` reads the host's apt sources (dlimages.mirrors.host_apt_uris) and passes them here.
[[ -n "$mirror" ]] || die "--mirror URL is required (invoke base reads it from this host's apt sources)"
[[ "$mirror" =~ ^https?://[^[:space:]]+$ ]] || die "--mirror must be an http(s) URL, got '$mirror'"
mirror="${mirror%/}"
[[ -n "$security" ]] || security="$mirror-security"
log "mirror: $mirror${security:+, security: $security}"

sources=("deb $mirror $suite main" "deb $mirror $suite-updates main")
[[ -n "$security" ]] && sources+=("deb $security $suite-security main")

mkdir -p "$out"
tarball="$out/debian12-minbase.tar"

# Documentation, man pages and locales are dropped as dpkg installs, as the official
# slim images do; copyright files stay for licence compliance. Merged /usr is set up the
# debootstrap way (symlinks + usr-is-merged): without the hook apt satisfies
# init-system-helpers with usrmerge, which pulls in full perl (+40 MB).
# shellcheck disable=SC2016 # mmdebstrap expands $1 in its hooks, not this shell
build_tarball() {
    local dest="$1"
    local -a args=(
        --mode=root --variant=minbase --format=tar --quiet
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
        --dpkgopt='path-exclude=/usr/share/man/*'
        --dpkgopt='path-exclude=/usr/share/doc/*'
        --dpkgopt='path-include=/usr/share/doc/*/copyright'
        --dpkgopt='path-exclude=/usr/share/locale/*'
        --dpkgopt='path-exclude=/usr/share/info/*'
        --aptopt='Acquire::Languages "none"'
        # The image keeps Debian's default sources, not the mirror it was bootstrapped from ($1 is
        # the hook's root directory, expanded by mmdebstrap).
        --customize-hook='rm -f "$1/etc/apt/sources.list"'
        --customize-hook='printf "%s\n" "Types: deb" "URIs: $DLI_MIRROR" "Suites: bookworm bookworm-updates" "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" "" "Types: deb" "URIs: $DLI_SECURITY_MIRROR" "Suites: bookworm-security" "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$1/etc/apt/sources.list.d/debian.sources"'
    )
    [[ -n "$include" ]] && args+=(--include="$include")
    local start=$SECONDS
    # The hooks chat on stdout even with --quiet: keep it in a log, show it on failure.
    if ! SOURCE_DATE_EPOCH="$epoch" mmdebstrap "${args[@]}" "$suite" "$dest" "${sources[@]}" \
        >"$dest.log" 2>&1; then
        tail -n 30 "$dest.log" >&2
        die "mmdebstrap failed; full log in $dest.log"
    fi
    log "built $dest in $((SECONDS - start))s, $(stat -c %s "$dest") bytes, sha256 $(sha256sum "$dest" | cut -d' ' -f1)"
}

export DLI_MIRROR="$mirror" DLI_SECURITY_MIRROR="${security:-$mirror-security}"
build_tarball "$tarball"
if ((check)); then
    build_tarball "$tarball.again"
    if cmp -s "$tarball" "$tarball.again"; then
        log "reproducible: two builds are byte-identical"
        rm -f "$tarball.again"
    else
        die "not reproducible: $tarball and $tarball.again differ (try diffoscope)"
    fi
fi

created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
start=$SECONDS
image_id="$(docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["bash"]' \
    --change "LABEL org.opencontainers.image.created=$created" \
    --change 'LABEL org.opencontainers.image.base.name=debian:bookworm-minbase' \
    --message "mmdebstrap minbase $suite, SOURCE_DATE_EPOCH=$epoch" \
    "$tarball" "$tag")" || die "docker import failed"
log "imported $tag in $((SECONDS - start))s"
log "image id: $image_id"
log "layer diff_id: $(docker image inspect --format '{{index .RootFS.Layers 0}}' "$tag") (equals the tarball's sha256)"
log "image size: $(docker image inspect --format '{{.Size}}' "$tag") bytes"
# The record `invoke build` and the build report can point at: which base, from which tarball.
record="$out/$(basename "${tag//:/-}").json"
printf '{"tag": "%s", "image_id": "%s", "layer": "%s", "tarball_sha256": "%s", "source_date_epoch": %s}\n' \
    "$tag" "$image_id" "$(docker image inspect --format '{{index .RootFS.Layers 0}}' "$tag")" \
    "$(sha256sum "$tarball" | cut -d' ' -f1)" "$epoch" >"$record"
log "recorded in $record"
