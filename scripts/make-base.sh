#!/usr/bin/env bash
# Build a minimal Debian root filesystem with mmdebstrap, reproducibly, write it as a docker-archive with a fixed
# image config (dlimages.building.imagearchive) and `docker load` it as the base image that the generated Dockerfiles
# start FROM. `invoke base` runs it, once for each OS of matrix.yaml with `bootstrap`.
#
# Usage: scripts/make-base.sh --repo DIR --lock-digest DIGEST --os NAME --suite CODENAME --tag TAG
#                             --archive URL --security-archive URL [--out DIR] [--epoch SECONDS] [--check]
#   --repo     flat repository holding exactly the packages of images/base-NAME.apt.lock (required;
#              `invoke base` fetches them, each checked against its SHA256, and indexes them with dpkg-scanpackages)
#   --lock-digest  the lock's digest (sha256:...), written into the image's history: a build sees a base made
#              from another lock by it, and makes the base again
#   --os       matrix.yaml's name of the OS (debian12, debian13): names the lock and the files (required)
#   --suite    its Debian suite (bookworm, trixie; required)
#   --tag      image to load as (required: matrix.yaml's `image` of the OS, dlimages/base:debian12)
#   --archive, --security-archive  the image's own apt sources: Debian's public archive and its security archive
#              (required; never this machine's mirror)
#   --out      where the tarball and the archive go (default .work/base)
#   --epoch    SOURCE_DATE_EPOCH (default 1747699200 = 2025-05-20T00:00:00Z)
#   --check    build the tarball twice and fail unless both tarballs and both image IDs are identical
#   --python   the Python that has the dlimages package installed (default python3)
#
# mmdebstrap installs from that repository alone, so nothing but the locked packages can enter, and the result
# does not depend on the day or the mirror: the same lock gives the same tarball and image ID on every machine.
# The image's own apt sources (deb822, as in the official debian image) name Debian's public archives; a mirror
# profile rewrites them at build time. The config's `created` is SOURCE_DATE_EPOCH (where `docker import` would
# stamp the current time), so the ID follows from the tarball alone: the classic image store's image ID, the config
# that the containerd store's manifest names.
set -euo pipefail

tag=""
os=""
suite=""
out=.work/base
epoch=1747699200
check=0
repo=""
lock_digest=""
archive=""
security_archive=""
python=python3
while (($#)); do
    case "$1" in
        --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
        --os) os="${2:?--os needs a value}"; shift 2 ;;
        --suite) suite="${2:?--suite needs a value}"; shift 2 ;;
        --out) out="${2:?--out needs a value}"; shift 2 ;;
        --epoch) epoch="${2:?--epoch needs a value}"; shift 2 ;;
        --check) check=1; shift ;;
        --repo) repo="${2:?--repo needs a folder}"; shift 2 ;;
        --lock-digest) lock_digest="${2:?--lock-digest needs a value}"; shift 2 ;;
        --archive) archive="${2:?--archive needs a URL}"; shift 2 ;;
        --security-archive) security_archive="${2:?--security-archive needs a URL}"; shift 2 ;;
        --python) python="${2:?--python needs a program}"; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) printf 'make-base.sh: unknown argument %q (try --help)\n' "$1" >&2; exit 2 ;;
    esac
done

log() { printf 'make-base.sh: %s\n' "$*"; }
die() { printf 'make-base.sh: error: %s\n' "$*" >&2; exit 1; }

[[ "$epoch" =~ ^[0-9]+$ ]] || die "--epoch must be whole seconds since 1970, got '$epoch'"
[[ $EUID -eq 0 ]] || die "must run as root (mmdebstrap --mode=root)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run scripts/engine.sh first"
docker info >/dev/null 2>&1 || die "no Docker engine answers: run scripts/engine.sh first"
# Checked before the minutes mmdebstrap takes: the archive is written by the package.
"$python" -c 'import dlimages.building.imagearchive' 2>/dev/null ||
    die "$python cannot import dlimages (pip install -e . first, or give --python)"

[[ -n "$repo" ]] || die "--repo DIR is required (invoke base fetches the locked packages into one)"
# Names of files and apt suites: checked before they reach a path or a hook.
[[ "$os" =~ ^[a-z][a-z0-9.]*$ ]] || die "--os must be matrix.yaml's name of the OS (debian12), got '$os'"
[[ "$suite" =~ ^[a-z]+$ ]] || die "--suite must be a Debian codename (bookworm), got '$suite'"
[[ -n "$tag" ]] || die "--tag is required (matrix.yaml's image of the OS)"
[[ "$lock_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "--lock-digest must be sha256:<64 hex digits>, got '$lock_digest'"
[[ -f "$repo/Packages" ]] || die "--repo $repo holds no Packages index (invoke base makes it)"
repo="$(cd "$repo" && pwd)"
# Every package of the repository, by name: the essential ones are unpacked first, apt installs the rest. Not
# --variant=minbase, which picks packages by the Priority the index gives them, and an index made from the .deb
# files has their own field, not the archive's (apt itself is "important" there).
include="$(sed -n 's/^Package: //p' "$repo/Packages" | sort -u | paste -sd, -)"
# The image's own apt sources: Debian's public archives as `invoke base` passes them (--archive, --security-archive;
# never this machine's mirror: the image must not depend on where it was made), for its suite.
[[ -n "$archive" && -n "$security_archive" ]] || die "--archive and --security-archive are required (invoke base passes them)"
export DLI_MIRROR="$archive" DLI_SECURITY_MIRROR="$security_archive" DLI_SUITE="$suite"
log "packages: the $(tr , '\n' <<<"$include" | wc -l) of the lock, from $repo"

mkdir -p "$out"
tarball="$out/$os-minbase.tar"
archive="$out/$os-minbase.docker.tar"
# The image history's line for the layer: how it was made, without mirrors or paths of this machine
# (it is part of the image ID).
created_by="mmdebstrap --mode=root --variant=essential --format=tar $suite, every package of base-$os.apt.lock $lock_digest"
created_by+=" (merged-usr hook; man, doc, locale, info excluded; SOURCE_DATE_EPOCH=$epoch)"

# Documentation, man pages and locales are dropped as dpkg installs, as the official
# slim images do; copyright files stay for licence compliance. Merged /usr is set up the
# debootstrap way (symlinks + usr-is-merged): without the hook apt satisfies
# init-system-helpers with usrmerge, which pulls in full perl (+40 MB).
# shellcheck disable=SC2016 # mmdebstrap expands $1 in its hooks, not this shell
build_tarball() {
    local dest="$1"
    local -a args=(
        --mode=root --variant=essential --include="$include" --format=tar --quiet
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
        --dpkgopt='path-exclude=/usr/share/man/*'
        --dpkgopt='path-exclude=/usr/share/doc/*'
        --dpkgopt='path-include=/usr/share/doc/*/copyright'
        --dpkgopt='path-exclude=/usr/share/locale/*'
        --dpkgopt='path-exclude=/usr/share/info/*'
        --aptopt='Acquire::Languages "none"'
        # The image keeps Debian's default sources, not the repository it was made from ($1 is the hook's root
        # directory, expanded by mmdebstrap).
        --customize-hook='rm -f "$1/etc/apt/sources.list"'
        # Empty /etc/hosts and /etc/resolv.conf, as the runtime binds its own over them: without them every build step
        # would make them as mount points and delete them after, and the classic store would keep /etc in each layer.
        --customize-hook='touch --date="@$SOURCE_DATE_EPOCH" "$1/etc/hosts" "$1/etc/resolv.conf"'
        --customize-hook='printf "%s\n" "Types: deb" "URIs: $DLI_MIRROR" "Suites: $DLI_SUITE $DLI_SUITE-updates" "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" "" "Types: deb" "URIs: $DLI_SECURITY_MIRROR" "Suites: $DLI_SUITE-security" "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$1/etc/apt/sources.list.d/debian.sources"'
    )
    local start=$SECONDS
    # The hooks chat on stdout even with --quiet: keep it in a log, show it on failure.
    if ! SOURCE_DATE_EPOCH="$epoch" mmdebstrap "${args[@]}" "$suite" "$dest" "deb [trusted=yes] copy://$repo ./" \
        >"$dest.log" 2>&1; then
        tail -n 30 "$dest.log" >&2
        die "mmdebstrap failed; full log in $dest.log"
    fi
    log "built $dest in $((SECONDS - start))s, $(stat -c %s "$dest") bytes, sha256 $(sha256sum "$dest" | cut -d' ' -f1)"
}

# Writes the docker-archive of a tarball (atomically) and prints the image ID `docker load` gives it.
write_archive() {
    "$python" -m dlimages.building.imagearchive --layer "$1" --out "$2" --tag "$tag" --epoch "$epoch" \
        --created-by "$created_by"
}

build_tarball "$tarball"
image_id="$(write_archive "$tarball" "$archive")" || die "could not write the image archive $archive"
log "wrote $archive, image id $image_id"
if ((check)); then
    build_tarball "$tarball.again"
    cmp -s "$tarball" "$tarball.again" ||
        die "not reproducible: $tarball and $tarball.again differ (try diffoscope)"
    again_id="$(write_archive "$tarball.again" "$archive.again")" ||
        die "could not write the image archive $archive.again"
    [[ "$again_id" == "$image_id" ]] ||
        die "not reproducible: the same tarball gave image IDs $image_id and $again_id"
    log "reproducible: two builds give byte-identical tarballs and the same image id"
    rm -f "$tarball.again" "$archive.again"
fi

start=$SECONDS
docker load -i "$archive" || die "docker load -i $archive failed"
docker image inspect "$tag" >/dev/null || die "docker load did not tag $tag"
# The config digest the engine holds, from its own manifest (`docker save`, 77 MB): on the classic store it is the
# image ID, on the containerd store the ID is the manifest's digest and the config is what it names.
loaded_id="$(docker save "$tag" | tar -xOf - manifest.json | "$python" -c 'import json, sys
config = json.load(sys.stdin)[0]["Config"]
print("sha256:" + config.rsplit("/", 1)[-1].removesuffix(".json"))')" || die "could not read back $tag with docker save"
[[ "$loaded_id" == "$image_id" ]] ||
    die "docker load gave $tag the image config $loaded_id, not $image_id as computed"
log "loaded $tag in $((SECONDS - start))s"
log "image id: $image_id (the same for this tarball on every machine)"
log "layer diff_id: $(docker image inspect --format '{{index .RootFS.Layers 0}}' "$tag") (equals the tarball's sha256)"
log "image size: $(docker image inspect --format '{{.Size}}' "$tag") bytes"
# The record `invoke build` and the build report can point at: which base, from which tarball.
record="$out/$(basename "${tag//:/-}").json"
printf '{"tag": "%s", "image_id": "%s", "layer": "%s", "tarball_sha256": "%s", "archive_sha256": "%s", "source_date_epoch": %s}\n' \
    "$tag" "$image_id" "$(docker image inspect --format '{{index .RootFS.Layers 0}}' "$tag")" \
    "$(sha256sum "$tarball" | cut -d' ' -f1)" "$(sha256sum "$archive" | cut -d' ' -f1)" "$epoch" >"$record"
log "recorded in $record"
