#!/usr/bin/env bash
# The user's commands, run the way users run them: as an unprivileged member of the `docker` group (the normal setup,
# and the job user on GitHub's hosted runners), from a clone and a virtual environment of its own, against the engine
# CI started (DOCKER_HOST) and the registry it pushed to. Each command must end without a traceback and give what
# root's run gave: a cache-warm build leaves the very image root built, the push finds the registry's digest
# unchanged, a zstd push works from the user's clone, the image tests pass, dl-smoke says "no GPU" (exit 77), the
# image root signed verifies against the public key (as a GPU node's user checks it) and smoke runs its digest,
# doctor gives root's verdicts, disk reports; a folder the user cannot write is refused (exit 2) before anything.
#
# Usage: .ci/as-user.sh REGISTRY IMAGE PUBLIC-KEY BUILD-FLAGS...   (as root, after root built, pushed and signed IMAGE)
# Creates the user dlimages-user when it does not exist, and deletes it (with its home) at the end if it did.
set -euo pipefail

readonly USER_NAME=dlimages-user
log() { printf 'as-user.sh: %s\n' "$*"; }
die() { printf 'as-user.sh: FAILED: %s\n' "$*" >&2; exit 1; }

(($# >= 4)) || die "usage: .ci/as-user.sh REGISTRY IMAGE PUBLIC-KEY BUILD-FLAGS..."
registry="$1" image="$2" public_key="$3"
shift 3
build_flags="$*"
[[ $EUID -eq 0 ]] || die "run as root: it creates the unprivileged user"
[[ -n "${DOCKER_HOST:-}" ]] || die "DOCKER_HOST is not set: run it from \`invoke ci\`"
repo="$(cd "$(dirname "$0")/.." && pwd)"

created=0
if ! id "$USER_NAME" >/dev/null 2>&1; then
    useradd --create-home --groups docker --shell /bin/bash "$USER_NAME"
    created=1
fi
# The user goes, and with it what its tests left in /tmp (pytest's folder, owned by its uid, which a later user
# would be given).
readonly ZSTD_REGISTRY=dlimages-user-zstd
cleanup() {
    bash "$repo/.ci/registry.sh" stop "$ZSTD_REGISTRY" >/dev/null 2>&1
    ((created)) && { userdel --remove "$USER_NAME" 2>/dev/null; rm -rf "/tmp/pytest-of-$USER_NAME"; }
    true
}
trap cleanup EXIT
id -nG "$USER_NAME" | grep -qw docker || die "$USER_NAME is not in the docker group"
home="$(getent passwd "$USER_NAME" | cut -d: -f6)"
work="$home/dlimages"
root_id="$(docker image inspect --format '{{.Id}}' "$image")" || die "root's image $image is missing"
# The commit root built (its revision label): the user builds that very commit.
revision="$(docker image inspect --format '{{index .Config.Labels "org.opencontainers.image.revision"}}' "$image")"
[[ "$revision" =~ ^[0-9a-f]{40}$ ]] || die "root's $image comes from '$revision', not from a commit"
rm -rf "$work"
git clone --quiet "$repo" "$work"
git -C "$work" -c advice.detachedHead=false checkout --quiet "$revision"
chown -R "$USER_NAME:" "$work"
out="$(mktemp -d)"
chmod 0755 "$out"

# One user command: its output in $out/NAME.log (and on the screen), its exit code returned; never a traceback.
as_user() {
    local name="$1" code=0
    shift
    log "as $USER_NAME: $*"
    runuser -u "$USER_NAME" -- env -u PYENV_ROOT HOME="$home" USER="$USER_NAME" LOGNAME="$USER_NAME" \
        PATH="$home/venv/bin:/usr/local/bin:/usr/bin:/bin" bash -c "cd '$work' && $*" 2>&1 | tee "$out/$name.log" \
        || code="${PIPESTATUS[0]}"
    if grep -q '^Traceback (most recent call last)' "$out/$name.log"; then
        die "\`$*\` printed a Python traceback"
    fi
    return "$code"
}

# What a registry holds under a tag: its manifest digest (a HEAD request, as docker would make it).
remote_digest() {
    local name="${image%%:*}" tag="${image##*:}"
    curl -fsI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$registry/v2/$name/manifests/$tag" \
        | awk 'tolower($1) == "docker-content-digest:" {print $2}' | tr -d '\r'
}

root_digest="$(remote_digest)"
[[ -n "$root_digest" ]] || die "the registry $registry has no $image: run this after root's push"
invoke doctor --json >"$out/doctor-root.json"

start=$SECONDS
# The README's install, for the main job: the system Python (the user cannot reach root's), a venv of the user's own.
as_user install "python3 -m venv ~/venv && python -m pip install --quiet -e ." || die "pip install -e . failed"
log "install: $((SECONDS - start)) s"

# A folder the user cannot write is exit 2 before anything is fetched (it was a traceback).
code=0
as_user apt-repo-unwritable "invoke apt-repo --to /usr/local/dlimages-apt-repo" || code=$?
((code == 2)) || die "invoke apt-repo into a folder the user cannot write exited $code, not 2"
grep -q "cannot be written" "$out/apt-repo-unwritable.log" || die "invoke apt-repo did not say it cannot write there"
[[ ! -e /usr/local/dlimages-apt-repo ]] || die "invoke apt-repo made /usr/local/dlimages-apt-repo"

start=$SECONDS
# shellcheck disable=SC2086 # the build flags are words
as_user build "invoke build $build_flags" || die "invoke build failed"
user_id="$(docker image inspect --format '{{.Id}}' "$image")"
[[ "$user_id" == "$root_id" ]] || die "the user's build made $user_id, root's $root_id"
log "build (cache-warm): $((SECONDS - start)) s, the image root built ($user_id)"

as_user push "invoke push --registry $registry --report .work/build-report.json" || die "invoke push failed"
[[ "$(remote_digest)" == "$root_digest" ]] || die "the registry's $image moved from $root_digest"
log "push: the registry still holds $root_digest"

# zstd, as the user: the offline base's layers compressed as the engine streams them, in the user's own .work/, pushed
# to a registry of its own (root's tag stays gzip), pulled back by invoke; nothing is left in .work/ but the report.
zstd_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
bash "$repo/.ci/registry.sh" start "$ZSTD_REGISTRY" "$zstd_port" >/dev/null || die "could not start a registry"
as_user push-zstd "invoke push --image dlimages/base:debian13 --registry 127.0.0.1:$zstd_port --compression zstd \
    --no-sign --report .work/zstd-report.json" || die "invoke push --compression zstd failed"
curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://127.0.0.1:$zstd_port/v2/dlimages/base/manifests/debian13" | grep -q 'layer.v1.tar+zstd' \
    || die "the registry got no zstd layers"
[[ -z "$(find "$work/.work" -maxdepth 1 -name 'push-*')" ]] || die "invoke push left its zstd layers in .work/"
bash "$repo/.ci/registry.sh" stop "$ZSTD_REGISTRY" >/dev/null
log "push --compression zstd: zstd layers, pulled back, nothing left in .work/"

# The main job's install has no test tools: `invoke test` names the extra that brings them, exit 2, nothing run.
code=0
as_user test-missing "invoke test" || code=$?
((code == 2)) || die "invoke test without the test tools exited $code, not 2"
grep -qF "pip install -e '.[test]'" "$out/test-missing.log" || die "invoke test did not name the test extra"
as_user install-test "python -m pip install --quiet -e '.[test]'" || die "pip install -e '.[test]' failed"
as_user test "invoke test" || die "invoke test failed"

code=0
as_user smoke "invoke smoke --image $image" || code=$?
((code == 77)) || die "invoke smoke exited $code; without a GPU it must say skipped (77)"
log "smoke: exit 77 (no GPU here), as for root"

# As on a GPU node: the image root pushed and signed, verified against the public key alone, then run by digest.
install -m 0644 -o "$USER_NAME" "$public_key" "$home/cosign.pub"
verified="$registry/${image%%:*}@$root_digest"
as_user verify "invoke verify --image $registry/$image --key ~/cosign.pub" || die "invoke verify failed"
[[ "$(tail -n 1 "$out/verify.log")" == "verified $verified" ]] || die "invoke verify did not name $verified"
code=0
as_user smoke-verified "invoke smoke --image $registry/$image --key ~/cosign.pub" || code=$?
((code == 77)) || die "invoke smoke of the signed image exited $code, not 77 (no GPU here)"
grep -qF "$verified: no NVIDIA container runtime" "$out/smoke-verified.log" || die "smoke did not run $verified"
log "verify: $verified; smoke ran that digest"

as_user doctor "invoke doctor --json >~/doctor.json" || die "invoke doctor failed"
cmp -s "$home/doctor.json" "$out/doctor-root.json" || die "invoke doctor's verdicts differ from root's"
log "doctor: root's verdicts"

as_user disk "invoke disk" || die "invoke disk failed"
grep -q '^free: ' "$out/disk.log" || die "invoke disk said nothing of free space"

log "every command ran as $USER_NAME (groups: $(id -nG "$USER_NAME")) without a traceback, with root's results"
rm -rf "$out"
