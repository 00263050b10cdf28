#!/usr/bin/env bash
# Install, start and stop the local fakecloud emulator (see localstack/README.md).
#
#   localstack/fakecloud.sh install            cargo install the pinned version unless present
#   localstack/fakecloud.sh start [--port N]   start in the background, wait for health, print endpoint
#   localstack/fakecloud.sh stop               stop the emulator started by `start` (idempotent)
#   localstack/fakecloud.sh status             running / not running; exit 0 / 1
#   localstack/fakecloud.sh endpoint           print the endpoint URL
#
# Environment:
#   FAKECLOUD_BIN            binary to run (default: `fakecloud` on PATH, ~/.cargo/bin included)
#   FAKECLOUD_PORT           loopback port for `start` (default 4566)
#   FAKECLOUD_START_TIMEOUT  seconds `start` waits for the health check (default 30)
#
# State lives in <repo>/.run: fakecloud.pid, fakecloud.port, fakecloud.log.
# fakecloud is AGPL-licensed: it only ever runs as a separate process.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
RUN_DIR="$REPO_ROOT/.run"
PID_FILE="$RUN_DIR/fakecloud.pid"
PORT_FILE="$RUN_DIR/fakecloud.port"
LOG_FILE="$RUN_DIR/fakecloud.log"
VERSION_FILE="$SCRIPT_DIR/fakecloud.version"

HOST=127.0.0.1
DEFAULT_PORT="${FAKECLOUD_PORT:-4566}"
START_TIMEOUT="${FAKECLOUD_START_TIMEOUT:-30}"
FAKECLOUD="${FAKECLOUD_BIN:-fakecloud}"

# `cargo install` puts binaries here; it is often not on a fresh shell's PATH.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

log() { printf 'fakecloud.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

pinned_version() {
    local v
    v=$(tr -d '[:space:]' <"$VERSION_FILE")
    [[ -n "$v" ]] || die "$VERSION_FILE is empty"
    printf '%s\n' "$v"
}

# Version of the binary $FAKECLOUD resolves to, or nothing if there is none.
# `fakecloud --version` prints "fakecloud X.Y.Z".
installed_version() {
    command -v "$FAKECLOUD" >/dev/null 2>&1 || return 0
    "$FAKECLOUD" --version 2>/dev/null | awk 'NR == 1 { print $NF }' || true
}

valid_port() {
    [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535))
}

endpoint_for() { printf 'http://%s:%s\n' "$HOST" "$1"; }

healthy() {
    curl -sf --max-time 2 -o /dev/null "$(endpoint_for "$1")/_fakecloud/health"
}

# Pid from the pidfile if that process is alive and is a fakecloud; else nothing.
# The command-line check guards against a recycled pid after a reboot.
running_pid() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid
    pid=$(tr -d '[:space:]' <"$PID_FILE")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    [[ "$(process_args "$pid")" == *fakecloud* ]] || return 0
    printf '%s\n' "$pid"
}

process_args() {
    if [[ -r "/proc/$1/cmdline" ]]; then
        tr '\0' ' ' <"/proc/$1/cmdline"
    else
        ps -p "$1" -o args= 2>/dev/null || true
    fi
}

# Port of the emulator started by `start`, else the configured port.
current_port() {
    local port=""
    if [[ -n "$(running_pid)" && -f "$PORT_FILE" ]]; then
        port=$(tr -d '[:space:]' <"$PORT_FILE")
    fi
    if [[ -n "$port" ]] && valid_port "$port"; then
        printf '%s\n' "$port"
    else
        printf '%s\n' "$DEFAULT_PORT"
    fi
}

clear_state() { rm -f "$PID_FILE" "$PORT_FILE"; }

log_tail() {
    if [[ -s "$LOG_FILE" ]]; then
        log "last lines of $LOG_FILE:"
        tail -n 40 "$LOG_FILE" >&2
    else
        log "$LOG_FILE is empty"
    fi
}

cmd_install() {
    local pin have
    pin=$(pinned_version)
    have=$(installed_version)
    if [[ "$have" == "$pin" ]]; then
        log "fakecloud $pin already installed ($(command -v "$FAKECLOUD"))"
        return 0
    fi
    if [[ -n "${FAKECLOUD_BIN:-}" && -n "$have" ]]; then
        # An explicit override wins; say so loudly rather than silently replacing it.
        log "warning: FAKECLOUD_BIN=$FAKECLOUD is fakecloud $have, the pin is $pin; using it as is"
        return 0
    fi
    # Someone (often an earlier `make tools`) may already be compiling it: wait
    # for that instead of starting a second 25-minute build next to it.
    if command -v pgrep >/dev/null 2>&1; then
        local busy=""
        while busy=$(pgrep -f '(^|/)cargo install (.* )?fakecloud( |$)' | tr '\n' ' ') && [[ -n "$busy" ]]; do
            log "a 'cargo install fakecloud' is already running (pid ${busy% }); waiting for it to finish"
            sleep 30
        done
        have=$(installed_version)
        if [[ "$have" == "$pin" ]]; then
            log "fakecloud $pin installed ($(command -v "$FAKECLOUD"))"
            return 0
        fi
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found; install Rust with rustup first"
    log "installing fakecloud $pin${have:+ (found $have)} with cargo install"
    log "note: this compiles ~800 crates once per machine, with a cheaper release profile (opt-level 1,"
    log "      256 codegen units, no debug info): see localstack/README.md for the measured times"
    # The emulator only serves test traffic: compile time matters more than
    # its speed. Each setting can still be overridden from the environment.
    CARGO_PROFILE_RELEASE_OPT_LEVEL="${CARGO_PROFILE_RELEASE_OPT_LEVEL:-1}" \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-256}" \
        CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-0}" \
        CARGO_PROFILE_RELEASE_INCREMENTAL=false \
        cargo install fakecloud --locked --version "$pin"
    have=$(installed_version)
    [[ "$have" == "$pin" ]] ||
        die "after cargo install, '$FAKECLOUD --version' reports '${have:-nothing}', expected $pin (check PATH)"
    log "fakecloud $pin installed ($(command -v "$FAKECLOUD"))"
}

cmd_start() {
    local port="$DEFAULT_PORT"
    while (($#)); do
        case "$1" in
        --port)
            (($# >= 2)) || die "--port needs a value"
            port="$2"
            shift 2
            ;;
        --port=*)
            port="${1#--port=}"
            shift
            ;;
        *) die "start: unknown argument '$1' (usage: start [--port N])" ;;
        esac
    done
    valid_port "$port" || die "invalid port '$port'"
    port=$((10#$port))

    local pid running_port
    pid=$(running_pid)
    if [[ -n "$pid" ]]; then
        running_port=$(current_port)
        [[ "$running_port" == "$port" ]] ||
            die "fakecloud is already running on port $running_port (pid $pid); run '$0 stop' first"
        if healthy "$port"; then
            endpoint_for "$port"
            return 0
        fi
        log "fakecloud (pid $pid) is running but not healthy yet; waiting"
    else
        clear_state
        if healthy "$port"; then
            # Another fakecloud (another checkout, or started by hand) owns the port.
            log "warning: a fakecloud not started by this script already answers on port $port; using it ('stop' will not stop it)"
            endpoint_for "$port"
            return 0
        fi
        command -v "$FAKECLOUD" >/dev/null 2>&1 ||
            die "'$FAKECLOUD' not found; run 'make tools' or '$0 install'"
        command -v curl >/dev/null 2>&1 || die "curl not found"

        mkdir -p "$RUN_DIR"
        : >"$LOG_FILE"
        nohup "$FAKECLOUD" --addr "$HOST:$port" </dev/null >>"$LOG_FILE" 2>&1 &
        pid=$!
        printf '%s\n' "$pid" >"$PID_FILE"
        printf '%s\n' "$port" >"$PORT_FILE"
        log "started fakecloud (pid $pid) on $HOST:$port, log in ${LOG_FILE#"$REPO_ROOT"/}"
    fi

    local deadline=$((SECONDS + START_TIMEOUT))
    until healthy "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            clear_state
            log "fakecloud exited before becoming healthy"
            log_tail
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "fakecloud did not answer $(endpoint_for "$port")/_fakecloud/health within ${START_TIMEOUT}s; stopping it"
            kill "$pid" 2>/dev/null || true
            clear_state
            log_tail
            exit 1
        fi
        sleep 0.2
    done
    endpoint_for "$port"
}

cmd_stop() {
    local pid
    pid=$(running_pid)
    if [[ -z "$pid" ]]; then
        clear_state
        log "fakecloud is not running"
        return 0
    fi
    kill "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "fakecloud (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    clear_state
    log "stopped fakecloud (pid $pid)"
}

cmd_status() {
    local pid port
    pid=$(running_pid)
    port=$(current_port)
    if [[ -n "$pid" ]] && healthy "$port"; then
        printf 'fakecloud running (pid %s) at %s\n' "$pid" "$(endpoint_for "$port")"
        return 0
    fi
    if [[ -n "$pid" ]]; then
        printf 'fakecloud not healthy (pid %s alive, no answer at %s)\n' "$pid" "$(endpoint_for "$port")"
    else
        printf 'fakecloud not running (endpoint would be %s)\n' "$(endpoint_for "$port")"
    fi
    return 1
}

cmd_endpoint() { endpoint_for "$(current_port)"; }

main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "$cmd" in
    install) cmd_install "$@" ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    endpoint) cmd_endpoint "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
