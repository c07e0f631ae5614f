#!/usr/bin/env bash
# Build a minimal Debian root filesystem with mmdebstrap, reproducibly, as an uncompressed tarball: the one layer of
# the base image that the generated Dockerfiles start FROM. `invoke base` runs it, once for each OS of matrix.yaml
# with `bootstrap`, then writes the tarball as a docker-archive with a fixed image config and loads it
# (dlimages' building/base.py).
#
# Usage: scripts/make-base.sh --repo DIR --os NAME --suite CODENAME --archive URL --security-archive URL
#                             [--out DIR] [--epoch SECONDS] [--check]
#   --repo     flat repository holding exactly the packages of images/base-NAME.apt.lock (required;
#              `invoke base` fetches them, each checked against its SHA256, and indexes them with dpkg-scanpackages)
#   --os       matrix.yaml's name of the OS (debian12, debian13): names the files (required)
#   --suite    its Debian suite (bookworm, trixie; required)
#   --archive, --security-archive  the image's own apt sources: Debian's public archive and its security archive
#              (required; never this machine's mirror)
#   --out      where the tarball goes, as NAME-minbase.tar (default .work/base)
#   --epoch    SOURCE_DATE_EPOCH (default 1747699200 = 2025-05-20T00:00:00Z)
#   --check    build the tarball twice and fail unless both are identical
#
# mmdebstrap installs from that repository alone, so nothing but the locked packages can enter, and the result
# does not depend on the day or the mirror: the same lock gives the same tarball on every machine. The image's own
# apt sources (deb822, as in the official debian image) name Debian's public archives; a mirror profile rewrites
# them at build time.
set -euo pipefail

os=""
suite=""
out=.work/base
epoch=1747699200
check=0
repo=""
archive=""
security_archive=""
while (($#)); do
    case "$1" in
        --os) os="${2:?--os needs a value}"; shift 2 ;;
        --suite) suite="${2:?--suite needs a value}"; shift 2 ;;
        --out) out="${2:?--out needs a value}"; shift 2 ;;
        --epoch) epoch="${2:?--epoch needs a value}"; shift 2 ;;
        --check) check=1; shift ;;
        --repo) repo="${2:?--repo needs a folder}"; shift 2 ;;
        --archive) archive="${2:?--archive needs a URL}"; shift 2 ;;
        --security-archive) security_archive="${2:?--security-archive needs a URL}"; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) printf 'make-base.sh: unknown argument %q (try --help)\n' "$1" >&2; exit 2 ;;
    esac
done

log() { printf 'make-base.sh: %s\n' "$*"; }
die() { printf 'make-base.sh: error: %s\n' "$*" >&2; exit 1; }

[[ "$epoch" =~ ^[0-9]+$ ]] || die "--epoch must be whole seconds since 1970, got '$epoch'"
[[ $EUID -eq 0 ]] || die "must run as root (mmdebstrap --mode=root)"
command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run scripts/engine.sh first"
[[ -n "$repo" ]] || die "--repo DIR is required (invoke base fetches the locked packages into one)"
# Names of files and apt suites: checked before they reach a path or a hook.
[[ "$os" =~ ^[a-z][a-z0-9.]*$ ]] || die "--os must be matrix.yaml's name of the OS (debian12), got '$os'"
[[ "$suite" =~ ^[a-z]+$ ]] || die "--suite must be a Debian codename (bookworm), got '$suite'"
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

build_tarball "$tarball"
if ((check)); then
    build_tarball "$tarball.again"
    cmp -s "$tarball" "$tarball.again" ||
        die "not reproducible: $tarball and $tarball.again differ (try diffoscope)"
    log "reproducible: two builds give byte-identical tarballs"
    rm -f "$tarball.again" "$tarball.again.log"
fi
