#!/usr/bin/env bash
# Run `counterctl local run` (the local event-source runner) in the background.
#
#   localstack/local-runner.sh start [counterctl global flags...]   start unless running; wait until it polls
#   localstack/local-runner.sh restart [counterctl global flags...] stop, then start (picks up new handler code)
#   localstack/local-runner.sh stop                                 stop it (SIGTERM, then SIGKILL after 30 s)
#   localstack/local-runner.sh status                               running / not running; exit 0 / 1
#
# Environment:
#   COUNTERCTL                   the counterctl binary (default: <cargo target dir>/debug/counterctl)
#   LOCAL_RUNNER_START_TIMEOUT   seconds `start` waits for the runner's first heartbeat (default 60: it
#                                starts the prebuilt handler binaries first, in a second or two); a
#                                failing one (the handlers cannot start) fails `start` with the reason
#
# State lives in <repo>/.run: local-runner.pid and local-runner.log (the
# handlers' own logs are under .run/esm-runner/).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
RUN_DIR="$REPO_ROOT/.run"
PID_FILE="$RUN_DIR/local-runner.pid"
LOG_FILE="$RUN_DIR/local-runner.log"
COUNTERCTL="${COUNTERCTL:-$("$SCRIPT_DIR/lib/target-dir.sh")/debug/counterctl}"
START_TIMEOUT="${LOCAL_RUNNER_START_TIMEOUT:-60}"
STOP_TIMEOUT=30
# Logged by counterctl once it polls (ops-cli/src/commands/local.rs, STARTED).
READY_LINE="local runner started"
# Logged once it discovered the mappings and started the handlers, followed by
# `ok` or `failing: <reason>` (localstack/runner/src/health.rs, FIRST_HEARTBEAT).
HEARTBEAT_LINE="first runner heartbeat:"
# Starts the line of each function URL it serves (local.rs, API_LINE), repeated on stdout.
API_LINE="local API:"

log() { printf 'local-runner.sh: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# shellcheck source=localstack/lib/process.sh
source "$SCRIPT_DIR/lib/process.sh"

# Pid from the pidfile if that process is alive and is a `counterctl ... local run`.
running_pid() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid args
    pid=$(tr -d '[:space:]' <"$PID_FILE")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    args=$(process_args "$pid")
    [[ "$args" == *counterctl* && "$args" == *" local run"* ]] || return 0
    printf '%s\n' "$pid"
}

log_tail() {
    if [[ -s "$LOG_FILE" ]]; then
        log "last lines of ${LOG_FILE#"$REPO_ROOT"/}:"
        tail -n 30 "$LOG_FILE" >&2
    fi
}

# Waits for LINE in the log while the runner PID lives, until DEADLINE (in
# SECONDS): 0 once it shows; 1 at the deadline, said, the runner left
# running; a runner that exits ends the start with exit 1 ("exited WHEN").
await_line() {
    local line=$1 when=$2 pid=$3 deadline=$4
    until grep -q "$line" "$LOG_FILE" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            log "the runner exited $when"
            log_tail
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "no '$line' in the log within ${START_TIMEOUT}s; it keeps running (pid $pid)"
            log_tail
            return 1
        fi
        sleep 0.2
    done
}

cmd_start() {
    local pid
    pid=$(running_pid)
    if [[ -n "$pid" ]]; then
        log "already running (pid $pid), log in ${LOG_FILE#"$REPO_ROOT"/}"
        return 0
    fi
    [[ -x "$COUNTERCTL" ]] || die "$COUNTERCTL not found; build it with 'cargo build --bin counterctl --features ops-cli/local'"
    mkdir -p "$RUN_DIR"
    : >"$LOG_FILE"
    # Its own session where setsid exists, so a Ctrl-C meant for the shell
    # that started it does not stop it; it stops on SIGTERM (`stop`).
    local launcher=()
    command -v setsid >/dev/null 2>&1 && launcher=(setsid)
    (cd "$REPO_ROOT" && exec nohup ${launcher[@]+"${launcher[@]}"} "$COUNTERCTL" "$@" local run </dev/null >>"$LOG_FILE" 2>&1) &
    pid=$!
    printf '%s\n' "$pid" >"$PID_FILE"
    local deadline=$((SECONDS + START_TIMEOUT))
    await_line "$READY_LINE" "at start" "$pid" "$deadline" || return 0
    # Then its first heartbeat: the mappings discovered and the handlers
    # started, or why they cannot start (which fails the start, and `make deploy`).
    await_line "$HEARTBEAT_LINE" "before its first heartbeat" "$pid" "$deadline" || return 0
    if grep -q "$HEARTBEAT_LINE failing" "$LOG_FILE"; then
        log "the handlers cannot start; stopping the runner:"
        grep -A 30 "$HEARTBEAT_LINE failing" "$LOG_FILE" >&2 || true
        cmd_stop >/dev/null 2>&1 || true
        exit 1
    fi
    log "started (pid $pid), log in ${LOG_FILE#"$REPO_ROOT"/}. Stop it with: make local-stop"
    grep -o "$API_LINE.*" "$LOG_FILE" || true
}

cmd_stop() {
    local pid
    pid=$(running_pid)
    if [[ -z "$pid" ]]; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    # SIGTERM: the batch in flight on each source finishes, then the
    # handler processes are stopped.
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL (its handler processes may remain: see .run/esm-runner/)"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    pid=$(running_pid)
    if [[ -n "$pid" ]]; then
        printf 'local runner running (pid %s), log in %s\n' "$pid" "${LOG_FILE#"$REPO_ROOT"/}"
        return 0
    fi
    printf 'local runner not running\n'
    return 1
}

main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "$cmd" in
    start) cmd_start "$@" ;;
    restart)
        cmd_stop
        cmd_start "$@"
        ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
