#!/usr/bin/env bash
# Start or stop a throwaway local registry (Debian's docker-registry, the reference
# registry v2) on 127.0.0.1, for push/pull tests without any outside registry.
#
# Usage: .ci/registry.sh start NAME PORT [--auth USER:PASS] [--tls]
#        .ci/registry.sh stop NAME
#        .ci/registry.sh status NAME
#   --auth  require HTTP basic auth (htpasswd, bcrypt) for USER:PASS
#   --tls   serve HTTPS with a fresh self-signed certificate for 127.0.0.1, trusted by
#           dockerd through /etc/docker/certs.d/127.0.0.1:PORT/ca.crt
# Env:   REGISTRY_STATE_DIR (default /tmp/dlimages-registry): NAME/ holds config, storage,
#        htpasswd, certificate, pid and log; `stop` deletes it.
#
# Plain HTTP with basic auth works here: dockerd treats 127.0.0.0/8 as an insecure registry,
# so `docker login` / push / pull fall back to HTTP, and the reference registry only warns.
# --tls exists for clients that insist on HTTPS (and to rehearse a real registry).
set -euo pipefail

readonly STATE_ROOT="${REGISTRY_STATE_DIR:-/tmp/dlimages-registry}"
readonly START_TIMEOUT=20

log() { printf 'registry.sh: %s\n' "$*"; }
die() { printf 'registry.sh: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

running_pid() {
    local pidfile="$STATE_ROOT/$1/pid" pid
    [[ -f "$pidfile" ]] || return 1
    pid="$(cat "$pidfile")"
    kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

# HTTP status of GET /v2/ (200 open, 401 auth required), or 000 when nothing answers.
probe() {
    local scheme="$1" port="$2"
    curl -sk -o /dev/null -w '%{http_code}' --max-time 2 "$scheme://127.0.0.1:$port/v2/" || true
}

make_cert() {
    local dir="$1" port="$2"
    openssl req -x509 -newkey rsa:2048 -sha256 -days 7 -nodes -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1" \
        -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null || die "openssl could not make a certificate"
    # dockerd reads certs.d on every registry access: no daemon restart needed.
    install -D -m 0644 "$dir/tls.crt" "/etc/docker/certs.d/127.0.0.1:$port/ca.crt"
    log "self-signed certificate installed in /etc/docker/certs.d/127.0.0.1:$port/ca.crt"
}

start() {
    local name="$1" port="$2" auth="" tls=0
    shift 2
    while (($#)); do
        case "$1" in
            --auth) auth="${2:?--auth needs USER:PASS}"; shift 2 ;;
            --tls) tls=1; shift ;;
            *) die "unknown option '$1' for start" ;;
        esac
    done
    [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || die "NAME must be letters, digits, '.', '_' or '-', got '$name'"
    if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
        die "PORT must be 1-65535, got '$port'"
    fi
    [[ -z "$auth" || "$auth" == *:* ]] || die "--auth takes USER:PASS, got '$auth'"
    command -v docker-registry >/dev/null || die "docker-registry missing: run 'sudo bash scripts/engine.sh --fixtures' first"

    local dir="$STATE_ROOT/$name" pid
    if pid="$(running_pid "$name")"; then
        # Same name, same settings: nothing to do. Anything else would silently change a
        # registry others may be using, so refuse.
        if [[ "$(cat "$dir/args")" == "$port $auth $tls" ]]; then
            log "'$name' already running (pid $pid) on 127.0.0.1:$port"
            return
        fi
        die "'$name' already running (pid $pid) with other settings; stop it first"
    fi
    [[ "$(probe http "$port")$(probe https "$port")" == 000000 ]] \
        || die "something already answers on 127.0.0.1:$port"

    rm -rf "$dir"
    mkdir -p "$dir/data"
    chmod 0700 "$dir"
    printf '%s\n' "$port $auth $tls" >"$dir/args"

    local auth_yaml="" tls_yaml="" scheme=http
    if [[ -n "$auth" ]]; then
        command -v htpasswd >/dev/null || die "htpasswd missing (apache2-utils)"
        # The reference registry only accepts bcrypt entries.
        htpasswd -Bbn "${auth%%:*}" "${auth#*:}" >"$dir/htpasswd" 2>/dev/null || die "htpasswd failed"
        auth_yaml="auth:
  htpasswd:
    realm: dlimages-$name
    path: $dir/htpasswd"
    fi
    if ((tls)); then
        make_cert "$dir" "$port"
        tls_yaml="  tls:
    certificate: $dir/tls.crt
    key: $dir/tls.key"
        scheme=https
    fi
    cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: info
  fields:
    service: registry-$name
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(openssl rand -hex 16)
$tls_yaml
$auth_yaml
EOF

    setsid docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 </dev/null &
    pid=$!
    printf '%s\n' "$pid" >"$dir/pid"
    local waited=0 code
    while :; do
        code="$(probe "$scheme" "$port")"
        [[ "$code" == 200 || "$code" == 401 ]] && break
        if ! kill -0 "$pid" 2>/dev/null || ((waited >= START_TIMEOUT)); then
            tail -n 20 "$dir/log" >&2 || true
            die "registry '$name' did not come up on $scheme://127.0.0.1:$port (log: $dir/log)"
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    log "'$name' up: $scheme://127.0.0.1:$port (pid $pid, /v2/ -> $code${auth:+, basic auth as ${auth%%:*}}, storage $dir/data)"
}

stop() {
    local name="$1" dir="$STATE_ROOT/$1" pid port
    [[ -d "$dir" ]] || { log "'$name' not known; nothing to stop"; return; }
    if pid="$(running_pid "$name")"; then
        kill "$pid"
        local _
        for _ in {1..20}; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        log "'$name' stopped (pid $pid)"
    fi
    port="$(cut -d' ' -f1 "$dir/args" 2>/dev/null || true)"
    if [[ -n "$port" && -f "$dir/tls.crt" ]]; then
        rm -rf "/etc/docker/certs.d/127.0.0.1:$port"
    fi
    rm -rf "$dir"
    rmdir "$STATE_ROOT" 2>/dev/null || true # the last registry's stop leaves no empty folder behind
    log "'$name' state removed"
}

status() {
    local pid
    if pid="$(running_pid "$1")"; then
        log "'$1' running (pid $pid): $(cut -d' ' -f1 "$STATE_ROOT/$1/args" | sed 's/^/127.0.0.1:/')"
    else
        log "'$1' not running"
        return 1
    fi
}

case "${1:-}" in
    start) (($# >= 3)) || usage; shift; start "$@" ;;
    stop) (($# == 2)) || usage; stop "$2" ;;
    status) (($# == 2)) || usage; status "$2" ;;
    *) usage ;;
esac
