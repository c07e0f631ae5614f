#!/usr/bin/env bash
# Bring up a Docker engine with BuildKit (buildx) on a Debian 12 host, idempotently.
#
# Usage: scripts/engine.sh [--mirror URL] [--fixtures]             the host's engine (the one `docker` talks to)
#        scripts/engine.sh --own DIR [--mirror URL] [--fixtures]   an engine of its own: data root, sockets, log in DIR
#        scripts/engine.sh --stop-own DIR                          stop that engine and delete DIR
#        add --store containerd to --own: that engine keeps images in the containerd image store (the default of fresh
#        Docker 29+ installs) instead of the classic overlay2 store
# Without --own: if an engine already answers `docker info`, it is used as is: only cosign (and with --fixtures the
# tests' tools) is installed where missing, never the engine packages. Tasks that need the engine run this themselves
# when none answers (`--no-engine-setup` or DLIMAGES_NO_ENGINE_SETUP=1 turns that off). Installing packages and
# starting dockerd need root; a member of the `docker` group needs neither once an engine runs.
# --own is what `invoke ci` uses: a dockerd on a fresh data root, answering on DIR/docker.sock (group `docker`), so a
# run never touches the host's engine, images or build cache and leaves nothing behind (`--stop-own` deletes DIR,
# and only a DIR this script made). It refuses to start beside another dockerd: a second daemon takes over the
# first one's bridge (docker0) and iptables chains and breaks its builds.
#   --mirror    Debian mirror to install from (default: this host's, read from its apt sources)
#   --fixtures  also the image tests' tools (a registry, htpasswd, openssl, a browser): `invoke ci` asks for them; a
#               user who only builds gets the engine and what builds use (skopeo, mmdebstrap), nothing else
# Env:   DOCKERD_LOG (default /var/log/dockerd.log), DOCKERD_TIMEOUT (seconds, default 60),
#        DOCKERD_DATA_ROOT (default /var/lib/docker)
#
# Package sources are never written here: the Debian mirror is read from the host's
# apt configuration at run time. The engine (docker.io, docker-cli), docker-buildx and cosign are
# taken from Debian 13 (trixie) on that same mirror, through an apt preferences pin, the engine at
# the exact versions below: Debian 12's docker.io 20.10 carries BuildKit 0.8, which has no SOURCE_DATE_EPOCH
# (every cold build would give another image ID). 26.1.5 carries BuildKit 0.13.2; with the classic
# overlay2 image store it stamps history and `created` with SOURCE_DATE_EPOCH, and the generated
# Dockerfiles fix every file time themselves (templates/assets/dl-normalize).
set -euo pipefail

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
readonly DOCKERD_TIMEOUT="${DOCKERD_TIMEOUT:-60}"
DOCKERD_DATA_ROOT="${DOCKERD_DATA_ROOT:-/var/lib/docker}"
DOCKERD_PIDFILE=/var/run/docker.pid
DOCKERD_FLAGS=()
STORE=overlay2  # --store: the image store of an --own engine, overlay2 (classic) or containerd
# The file --own writes into its DIR: --stop-own deletes only a DIR that holds it.
readonly OWN_MARK=.dlimages-engine
readonly APT_DIR="${APT_DIR:-/etc/apt}"
readonly TRIXIE_SOURCES="$APT_DIR/sources.list.d/dlimages-trixie.sources"
readonly TRIXIE_PIN="$APT_DIR/preferences.d/dlimages-trixie"
# bookworm ships no buildx; trixie's is a static Go binary that depends on libc6 only.
# skopeo: `invoke bases` and `bases.mirror`; mmdebstrap: `invoke base` (the offline Debian bases); dpkg-dev:
# dpkg-scanpackages, which indexes the locked .deb files a build installs from; debian-archive-keyring at bookworm's
# newest, which holds Debian 13's archive keys too (`invoke lock` checks trixie's Release files against it: they are
# signed with Debian 12's keys as well today, not for ever).
readonly PACKAGES=(containerd runc iptables tini skopeo mmdebstrap dpkg-dev debian-archive-keyring)
# --fixtures: docker-registry, apache2-utils (htpasswd), openssl: the tests' local registries (.ci/registry.sh);
# chromium, chromium-driver: the image tests' browser (tests/image/test_browser.py); fonts-dejavu-core: text in its
# screenshots (installed without recommends, Chromium brings no font of its own).
readonly FIXTURE_PACKAGES=(docker-registry apache2-utils openssl chromium chromium-driver fonts-dejavu-core)
FIXTURES=0
readonly DOCKER_VERSION=26.1.5+dfsg1-9+deb13u1+b1
readonly ENGINE_PACKAGES=("docker.io=$DOCKER_VERSION" "docker-cli=$DOCKER_VERSION" docker-buildx)
# cosign signs and attests what `invoke push` publishes; `invoke verify` (and smoke, bench) check it. Bookworm has
# none; trixie's (2.5) is a static Go binary that depends on libc6 only, like buildx. Signing needs it whichever
# engine runs, so it is also installed on its own beside an engine that is already there.
readonly SIGN_PACKAGES=(cosign)
# The oldest engine whose BuildKit honours SOURCE_DATE_EPOCH (BuildKit 0.11 came with Docker 23.0).
readonly MIN_ENGINE_MAJOR=23

log() { printf 'engine.sh: %s\n' "$*"; }
die() { printf 'engine.sh: error: %s\n' "$*" >&2; exit 1; }

engine_answers() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }

# The host's Debian mirror, as the package reads it (`dlimages mirrors --json`: the one reader of apt sources) unless
# given. Without the package (the script run by hand first), the first Debian URI of the apt sources, read here.
host_debian_mirror() {
    local said
    said="$(dlimages mirrors --json 2>/dev/null | python3 -c 'import json, sys
print((json.load(sys.stdin)["host"]["debian"] or "").rstrip("/"))' 2>/dev/null)" && [[ -n "$said" ]] && {
        printf '%s\n' "$said"
        return
    }
    local found
    found="$(cat "$APT_DIR"/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ {print $2; exit}' || true)"
    [[ -n "$found" ]] || found="$(cat "$APT_DIR"/sources.list 2>/dev/null \
        | awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' || true)"
    [[ -n "$found" ]] && printf '%s\n' "${found%/}"
}

install_packages() {
    local mirror="$1"
    # Debian's docker.io postinst would start dockerd through invoke-rc.d; we start it
    # ourselves with known flags, so keep services down during the install.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi

    write_trixie_source "$mirror"
    local packages
    mapfile -t packages < <(wanted_packages)
    apt_install "${packages[@]}"
    log_origin docker-buildx
    log_origin cosign
}

# What comes from trixie, by name: the engine's packages and cosign.
trixie_packages() {
    local package
    for package in "${ENGINE_PACKAGES[@]}" "${SIGN_PACKAGES[@]}"; do printf '%s\n' "${package%%=*}"; done
}

# The one writer of the trixie source and its pin: every package the pin does not name stays at bookworm's.
write_trixie_source() {
    local mirror="$1" pinned
    pinned="$(trixie_packages | paste -sd ' ')"
    log "adding trixie source for $pinned only: $TRIXIE_SOURCES, pin: $TRIXIE_PIN"
    cat >"$TRIXIE_SOURCES" <<EOF
# Written by scripts/engine.sh: Debian 13 on the host's own mirror, for the packages its pin names only.
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$TRIXIE_PIN" <<EOF
# Written by scripts/engine.sh: nothing comes from trixie unless named here.
Package: *
Pin: release n=trixie
Pin-Priority: 1

Package: $pinned
Pin: release n=trixie
Pin-Priority: 990
EOF
}

# Which version of a package was installed, from where.
log_origin() {
    local origin
    origin="$(apt-cache policy "$1" | awk '/\*\*\*/ {getline; print $2, $3}')"
    log "$1 $(dpkg-query -W -f='${Version}' "$1") from $origin"
}

# What an install brings: the engine, cosign and what builds use, and with --fixtures the tests' tools.
wanted_packages() {
    printf '%s\n' "${PACKAGES[@]}" "${ENGINE_PACKAGES[@]}" "${SIGN_PACKAGES[@]}"
    if ((FIXTURES)); then printf '%s\n' "${FIXTURE_PACKAGES[@]}"; fi
}

apt_install() {
    log "apt-get update"
    apt-get update -qq || die "apt-get update failed"
    log "installing: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "$@" >/dev/null \
        || die "apt-get install failed (see output above)"
}

# What an engine that is already there lacks: cosign when no `cosign` is on PATH (one installed another way will
# do), and with --fixtures each fixture package that is not installed.
missing_tools() {
    command -v cosign >/dev/null || printf '%s\n' "${SIGN_PACKAGES[@]}"
    ((FIXTURES)) || return 0
    local package
    for package in "${FIXTURE_PACKAGES[@]}"; do
        [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" == "install ok installed" ]] \
            || printf '%s\n' "$package"
    done
}

# An engine that is already there is never reinstalled (the host may run another Docker): only what missing_tools
# names, cosign from trixie and the fixtures from the host's own apt sources.
install_tools_if_missing() {
    local mirror="${1:-}" missing hint=""
    mapfile -t missing < <(missing_tools)
    ((${#missing[@]})) || return 0
    if ((FIXTURES)); then hint=--fixtures; fi
    need_root "installing ${missing[*]}" "$hint"
    if ! command -v cosign >/dev/null; then  # cosign is among them, and comes from trixie
        mirror="$(debian_mirror "$mirror")"
        write_trixie_source "$mirror"
    fi
    apt_install "${missing[@]}"
}

# The CLI at /usr/local/bin/docker looks in ~/.docker/cli-plugins, /usr/local/lib/docker/cli-plugins,
# /usr/local/libexec/docker/cli-plugins, /usr/lib/docker/cli-plugins and /usr/libexec/docker/cli-plugins;
# Debian installs buildx in the last one. Link it only when the CLI does not find it.
ensure_buildx_visible() {
    if docker buildx version >/dev/null 2>&1; then
        log "buildx visible to $(command -v docker): $(docker buildx version)"
        return
    fi
    local plugin=/usr/libexec/docker/cli-plugins/docker-buildx
    [[ -x "$plugin" ]] || die "buildx plugin not found at $plugin"
    mkdir -p /usr/local/lib/docker/cli-plugins
    ln -sf "$plugin" /usr/local/lib/docker/cli-plugins/docker-buildx
    docker buildx version >/dev/null 2>&1 || die "docker CLI does not load $plugin"
    log "linked buildx into /usr/local/lib/docker/cli-plugins: $(docker buildx version)"
}

start_dockerd() {
    local pid=""
    [[ -f "$DOCKERD_PIDFILE" ]] && pid="$(cat "$DOCKERD_PIDFILE")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        log "dockerd already running (pid $pid), waiting for it to answer"
    else
        command -v dockerd >/dev/null || die "dockerd not installed"
        # The containerd store names its overlay snapshotter overlayfs; the classic store's driver is overlay2.
        local driver=overlay2
        [[ "$STORE" == containerd ]] && driver=overlayfs
        log "starting dockerd ($STORE image store, $driver, data root $DOCKERD_DATA_ROOT, log $DOCKERD_LOG)"
        # setsid: the daemon must outlive this script and the shell that ran it.
        setsid dockerd --storage-driver="$driver" --data-root="$DOCKERD_DATA_ROOT" \
            --pidfile="$DOCKERD_PIDFILE" "${DOCKERD_FLAGS[@]}" >>"$DOCKERD_LOG" 2>&1 </dev/null &
        pid=$!
    fi
    local waited=0
    until engine_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            die "dockerd (pid $pid) exited; log above and in $DOCKERD_LOG"
        fi
        if ((waited >= DOCKERD_TIMEOUT)); then
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            die "dockerd (pid $pid) did not answer 'docker info' within ${DOCKERD_TIMEOUT}s; see $DOCKERD_LOG"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "dockerd answers after ${waited}s (pid $pid)"
}

# An engine someone else runs may be too old, or use the containerd image store (whose `--load` re-exports
# layers compressed, so image IDs are not comparable with the classic store's): say so, do not change it.
warn_if_not_reproducible() {
    local version major store
    version="$(docker version --format '{{.Server.Version}}' 2>/dev/null || true)"
    major="${version%%.*}"
    if [[ "$major" =~ ^[0-9]+$ ]] && ((major < MIN_ENGINE_MAJOR)); then
        log "warning: engine $version predates BuildKit 0.11 (Docker $MIN_ENGINE_MAJOR): builds work, but two cold builds never give the same image ID"
    fi
    store="$(docker info --format '{{.DriverStatus}}' 2>/dev/null || true)"
    if [[ "$store" == *io.containerd.snapshotter* ]]; then
        log "warning: the engine uses the containerd image store: invoke build cannot tag what it builds there (its --iidfile names the config, the store names images by manifest), and the reproducibility checks here were made with the classic overlay2 store"
    fi
}

need_root() {
    [[ $EUID -eq 0 ]] || die "$1 needs root: run \`sudo bash scripts/engine.sh${2:+ $2}\` once (a member of the docker group needs no root after that)"
}

# The mirror given, else the host's (said on stderr: stdout is the answer).
debian_mirror() {
    local mirror="${1:-}"
    [[ -n "$mirror" ]] || mirror="$(host_debian_mirror)" \
        || die "no Debian mirror found in this host's apt sources: give one with --mirror URL"
    log "host Debian mirror: $mirror" >&2
    printf '%s\n' "$mirror"
}

install_if_missing() {
    local mirror
    mirror="$(debian_mirror "${1:-}")"
    install_packages "$mirror"
    ensure_buildx_visible
}

main() {
    if engine_answers; then
        log "engine already answers; leaving it as it is"
        docker version --format 'engine.sh: client {{.Client.Version}}, server {{.Server.Version}} (API {{.Server.APIVersion}})'
        docker buildx version 2>/dev/null | sed 's/^/engine.sh: /' || log "warning: no buildx plugin visible"
        warn_if_not_reproducible
        install_tools_if_missing "${1:-}"
        return
    fi
    need_root "installing and starting the Docker engine"
    install_if_missing "${1:-}"
    start_dockerd
    docker version --format 'engine.sh: client {{.Client.Version}}, server {{.Server.Version}} (API {{.Server.APIVersion}})'
    docker info --format 'engine.sh: storage driver {{.Driver}}, cgroup {{.CgroupVersion}}, root {{.DockerRootDir}}'
}

# An engine of its own under DIR: nothing of the host's engine is read or changed.
own() {
    local dir="$1" mirror="${2:-}"
    need_root "an engine of its own" "--own $dir"
    mkdir -p "$dir"
    touch "$dir/$OWN_MARK"  # from here on, --stop-own deletes DIR, whatever happens next
    local other
    other="$(pgrep -x dockerd | head -n 1 || true)"
    [[ -z "$other" ]] || die "another dockerd runs (pid $other): a second one would take over its bridge (docker0) and iptables chains; stop it first"
    if ! command -v dockerd >/dev/null || ! docker buildx version >/dev/null 2>&1; then
        install_if_missing "$mirror"
    else
        install_tools_if_missing "$mirror"
    fi
    getent group docker >/dev/null || die "no 'docker' group (Debian's docker.io makes it)"
    chmod 0711 "$dir"  # members of the docker group reach DIR/docker.sock; nothing else in DIR is theirs
    DOCKERD_DATA_ROOT="$dir/data" DOCKERD_PIDFILE="$dir/dockerd.pid" DOCKERD_LOG="$dir/dockerd.log"
    DOCKERD_FLAGS=(--exec-root="$dir/exec" --host="unix://$dir/docker.sock" --group=docker)
    if [[ "$STORE" == containerd ]]; then
        printf '{"features": {"containerd-snapshotter": true}}\n' >"$dir/daemon.json"
        DOCKERD_FLAGS+=(--config-file="$dir/daemon.json")
    fi
    export DOCKER_HOST="unix://$dir/docker.sock"
    start_dockerd
    docker version --format 'engine.sh: client {{.Client.Version}}, server {{.Server.Version}} (API {{.Server.APIVersion}})'
    log "an engine of its own: DOCKER_HOST=$DOCKER_HOST (data root $DOCKERD_DATA_ROOT)"
}

stop_own() {
    local dir="$1" pid="" waited=0
    [[ -f "$dir/$OWN_MARK" ]] || die "$dir was not made by \`scripts/engine.sh --own\`: not touching it"
    [[ -f "$dir/dockerd.pid" ]] && pid="$(cat "$dir/dockerd.pid")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        while kill -0 "$pid" 2>/dev/null && ((waited < DOCKERD_TIMEOUT)); do sleep 1; waited=$((waited + 1)); done
        kill -0 "$pid" 2>/dev/null && die "dockerd (pid $pid) did not stop within ${DOCKERD_TIMEOUT}s"
        log "dockerd (pid $pid) stopped after ${waited}s"
    fi
    # dockerd unmounts its layers when it stops; one killed before that leaves mounts that rm cannot cross.
    awk -v dir="$dir/" 'index($2, dir) == 1 {print $2}' /proc/self/mounts | sort -r | xargs -r -n 1 umount -l
    rm -rf --one-file-system "$dir"
    log "deleted $dir"
}

# Sourced (the tests do, for its functions): define them, run nothing.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

mode=main dir="" mirror=""
while (($#)); do
    case "$1" in
        --mirror) mirror="${2:?--mirror needs a URL}" && shift ;;
        --own) mode=own dir="${2:?--own needs a folder}" && shift ;;
        --stop-own) mode=stop_own dir="${2:?--stop-own needs a folder}" && shift ;;
        --fixtures) FIXTURES=1 ;;
        --store)
            STORE="${2:?--store needs overlay2 or containerd}" && shift
            [[ "$STORE" == overlay2 || "$STORE" == containerd ]] || die "--store '$STORE': overlay2 or containerd"
            ;;
        *) die "unknown argument '$1' (usage: scripts/engine.sh [--mirror URL] [--fixtures] | --own DIR [--store overlay2|containerd] [--mirror URL] [--fixtures] | --stop-own DIR)" ;;
    esac
    shift
done
case "$mode" in
    main) main "$mirror" ;;
    own) own "$dir" "$mirror" ;;
    stop_own) stop_own "$dir" ;;
esac
