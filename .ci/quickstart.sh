#!/usr/bin/env bash
# The README's set-up, the way a new user meets it on a PEP 668 system: in a fresh container of the Debian 12 base
# (no Python in it), Debian's own python3 and git come from apt (the packages the README names), then the README's
# set-up block runs as written (its clone taken from this checkout, mounted read-only, so the clone is clean), then
# each of its `invoke build` lines with `--dry-run` (no engine inside). Proves: the commands work unchanged there,
# the venv leaves the clone clean (a build would label its image -dirty otherwise), and Debian's python3 really is
# externally managed (a bare `pip install -e .`, the README's old line, is refused). The commands are read from the
# README each run, so the test breaks when the README drifts.
#
# What this host knows is read now and passed in at run time, never stored: its Debian mirrors (building/mirrors.py),
# its pip index (pip's own configuration), the CA bundle its tools trust (mounted read-only: a TLS-intercepting
# proxy's CA). The container is removed however the run ends; nothing is written on the host.
#
# Usage: .ci/quickstart.sh [PYTHON]   (PYTHON: one with this checkout's dlimages installed; default python3)
# Needs: an engine (DOCKER_HOST) holding the Debian 12 base (`invoke base`), reach to PyPI and a Debian archive.
set -euo pipefail

log() { printf 'quickstart.sh: %s\n' "$*"; }
die() { printf 'quickstart.sh: FAILED: %s\n' "$*" >&2; exit 1; }

readonly SRC=/src CA=/run/host-ca.pem

# Inside the container, as root: apt from the host's mirror, the README's lines, then the PEP 668 refusal.
inside() {
    export DEBIAN_FRONTEND=noninteractive
    local sources=/etc/apt/sources.list.d/debian.sources line clone
    if [[ -n "${APT_MIRROR:-}" ]]; then
        sed -Ei -e "s|^URIs: \S+/debian/?$|URIs: $APT_MIRROR|" \
            -e "s|^URIs: \S+/debian-security/?$|URIs: $APT_SECURITY_MIRROR|" "$sources"
        grep -qF "URIs: $APT_MIRROR" "$sources" || die "$sources names no Debian archive to replace"
    fi
    [[ ! -f "$CA" ]] || printf 'Acquire::https::CAInfo "%s";\n' "$CA" >/etc/apt/apt.conf.d/99host-ca
    ! command -v python3 >/dev/null || die "the base already has a python3: this would not test Debian's own"
    apt-get -qq update
    # shellcheck disable=SC2086 # the package names are words
    apt-get -qq -y install --no-install-recommends ${README_PACKAGES:?} >/dev/null
    [[ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]] \
        || die "Debian's python3 is not marked externally managed"
    # A checkout owned by another uid (a CI runner's) is still one to clone from.
    git config --global --add safe.directory "$SRC"

    # As a user's shell runs them: each line checked, no `set -u` (the venv's activate script is not written for it).
    cd ~
    set +u
    while IFS= read -r line; do
        log "README: $line"
        eval "$line" || die "the README's \`$line\` failed"
    done <<<"${README_SETUP:?}"
    clone="$PWD"
    [[ -n "${VIRTUAL_ENV:-}" && "$(command -v invoke)" == "$VIRTUAL_ENV/bin/invoke" ]] \
        || die "after the README's set-up, invoke is not the venv's"
    while IFS= read -r line; do
        log "README: $line --dry-run"
        eval "$line --dry-run" >/tmp/dry-run.log || { cat /tmp/dry-run.log; die "\`$line --dry-run\` failed"; }
        grep -qF -- "--build-arg REVISION=$(git rev-parse HEAD) " /tmp/dry-run.log \
            || { cat /tmp/dry-run.log; die "\`$line --dry-run\` does not build the clean commit"; }
    done <<<"${README_BUILDS:?}"
    set -u
    [[ -z "$(git status --porcelain)" ]] || die "the set-up left the clone dirty: $(git status --porcelain)"
    log "the README's set-up and its builds' dry runs worked; the clone is clean"

    # The README's old line, with the distribution's pip, outside the venv: refused by PEP 668.
    apt-get -qq -y install --no-install-recommends python3-pip >/dev/null
    local out code=0
    out="$(env -u VIRTUAL_ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        bash -c "cd '$clone' && pip install -e ." 2>&1)" || code=$?
    if ((code == 0)) || ! grep -q 'externally-managed-environment' <<<"$out"; then
        die "a bare \`pip install -e .\` with Debian's python3 was not refused (exit $code): $out"
    fi
    log "a bare \`pip install -e .\` is refused: externally-managed-environment (exit $code)"
}

if [[ "${1:-}" == --inside ]]; then
    inside
    exit
fi

python="${1:-python3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"

# The README's set-up section: its first code block, the packages it names for apt, and its `invoke build` lines.
section="$(awk '/^## /{on = ($0 == "## Set up and run")} on' "$repo/README.md")"
setup="$(awk '/^    /{print substr($0, 5); found = 1; next} found {exit}' <<<"$section")"
packages="$(grep -o 'apt-get install [a-z0-9 .+-]*[a-z0-9]' <<<"$section" | head -n 1 || true)"
builds="$(sed -n 's/^    \(invoke build .*\)$/\1/p' <<<"$section")"
[[ -n "$setup" && -n "$packages" && -n "$builds" ]] \
    || die "README.md's \"Set up and run\" has no set-up block, apt-get install or invoke build line"
[[ "$setup" == *REPO_URL* ]] || die "README.md's set-up clones no REPO_URL"

# This host's facts, read now through the package's commands: the Debian 12 base's name (`invoke matrix --json`), its
# Debian mirrors (none where its apt sources name none, as on GitHub's Ubuntu runners: the base's own sources stay)
# and the CA bundle its tools trust (`invoke mirrors --json`).
invoke_json() { (cd "$repo" && "$python" -m invoke "$@"); }
facts="$({ invoke_json matrix --json && invoke_json mirrors --json; } | "$python" -c 'import json, sys
text = sys.stdin.read()
cells, end = json.JSONDecoder().raw_decode(text)
host = json.loads(text[end:])["host"]
print(next(cell["base_image"] for cell in cells if cell["os"] == "debian12"))
for key in ("ca_bundle", "debian", "debian_security"):
    print(host[key] or "")')" || die "could not read this host's facts with $python (is dlimages installed there?)"
mapfile -t fact <<<"$facts"
image="${fact[0]}" ca="${fact[1]:-}" apt="${fact[2]:-}" apt_security="${fact[3]:-}"
pip_index=""
for key in :env:.index-url install.index-url global.index-url; do
    pip_index="$("$python" -m pip config get "$key" 2>/dev/null)" && break
done
docker image inspect "$image" >/dev/null 2>&1 || die "the engine has no $image: \`invoke base\` makes it"

args=(--rm --pull never --name "dlimages-quickstart-$$" -v "$repo:$SRC:ro" -e "README_SETUP=${setup//REPO_URL/$SRC}"
    -e "README_BUILDS=$builds" -e "README_PACKAGES=${packages#apt-get install }"
    -e "APT_MIRROR=$apt" -e "APT_SECURITY_MIRROR=$apt_security")
[[ -z "$ca" ]] || args+=(-v "$ca:$CA:ro" -e "PIP_CERT=$CA")
[[ -z "$pip_index" ]] || args+=(-e "PIP_INDEX_URL=$pip_index")
trap 'docker rm -f "dlimages-quickstart-$$" >/dev/null 2>&1 || true' EXIT
log "in a fresh $image container: apt-get install ${packages#apt-get install }, then the README's set-up"
docker run "${args[@]}" "$image" bash "$SRC/.ci/quickstart.sh" --inside
