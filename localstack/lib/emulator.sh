# shellcheck shell=bash
# The part of an emulator script that does not depend on which emulator it
# runs (sourced by localstack/fakecloud.sh and localstack/ministack.sh):
# the pid, port and log files under <repo>/.run, `start` (waits for the
# health path), `stop`, `status` and `endpoint`.
#
# The sourcing script sets, before it sources this file:
#   EMULATOR            its name: the state files' prefix, and a word of the process's command line
#   HEALTH_PATH         the path that answers 200 once the emulator serves
#   DEFAULT_PORT        loopback port of `start` without --port
#   START_TIMEOUT       seconds `start` waits for the health path
#   REPO_ROOT           the repository root
# and defines:
#   launch PORT LOG     starts the emulator in the background on 127.0.0.1:PORT, appending its
#                       output to LOG, and prints its pid; fails with a message when it cannot
#   runnable            fails with a message (how to install it) when the emulator is not installed
# and may define:
#   after_stop          runs once the emulator has stopped (removes what it leaves behind)

RUN_DIR="$REPO_ROOT/.run"
PID_FILE="$RUN_DIR/$EMULATOR.pid"
PORT_FILE="$RUN_DIR/$EMULATOR.port"
LOG_FILE="$RUN_DIR/$EMULATOR.log"
HOST=127.0.0.1

log() { printf '%s.sh: %s\n' "$EMULATOR" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

valid_port() {
    [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535))
}

endpoint_for() { printf 'http://%s:%s\n' "$HOST" "$1"; }

healthy() {
    curl -sf --max-time 2 -o /dev/null "$(endpoint_for "$1")$HEALTH_PATH"
}

# shellcheck source=localstack/lib/process.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/process.sh"

# Pid from the pidfile if that process is alive and is this emulator; else
# nothing. The command-line check guards against a recycled pid after a reboot.
running_pid() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid
    pid=$(tr -d '[:space:]' <"$PID_FILE")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    [[ "$(process_args "$pid")" == *"$EMULATOR"* ]] || return 0
    printf '%s\n' "$pid"
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
            die "$EMULATOR is already running on port $running_port (pid $pid); run '$0 stop' first"
        if healthy "$port"; then
            endpoint_for "$port"
            return 0
        fi
        log "$EMULATOR (pid $pid) is running but not healthy yet; waiting"
    else
        clear_state
        if healthy "$port"; then
            # Another instance (another checkout, or started by hand) owns the port.
            log "warning: a $EMULATOR not started by this script already answers on port $port; using it ('stop' will not stop it)"
            endpoint_for "$port"
            return 0
        fi
        runnable
        command -v curl >/dev/null 2>&1 || die "curl not found"

        mkdir -p "$RUN_DIR"
        : >"$LOG_FILE"
        pid=$(launch "$port" "$LOG_FILE")
        printf '%s\n' "$pid" >"$PID_FILE"
        printf '%s\n' "$port" >"$PORT_FILE"
        log "started $EMULATOR (pid $pid) on $HOST:$port, log in ${LOG_FILE#"$REPO_ROOT"/}"
    fi

    local deadline=$((SECONDS + START_TIMEOUT))
    until healthy "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            clear_state
            log "$EMULATOR exited before becoming healthy"
            log_tail
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "$EMULATOR did not answer $(endpoint_for "$port")$HEALTH_PATH within ${START_TIMEOUT}s; stopping it"
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
        log "$EMULATOR is not running"
        return 0
    fi
    kill "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$EMULATOR (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    clear_state
    if declare -F after_stop >/dev/null; then after_stop; fi
    log "stopped $EMULATOR (pid $pid)"
}

cmd_status() {
    local pid port
    pid=$(running_pid)
    port=$(current_port)
    if [[ -n "$pid" ]] && healthy "$port"; then
        printf '%s running (pid %s) at %s\n' "$EMULATOR" "$pid" "$(endpoint_for "$port")"
        return 0
    fi
    if [[ -n "$pid" ]]; then
        printf '%s not healthy (pid %s alive, no answer at %s)\n' "$EMULATOR" "$pid" "$(endpoint_for "$port")"
    else
        printf '%s not running (endpoint would be %s)\n' "$EMULATOR" "$(endpoint_for "$port")"
    fi
    return 1
}

cmd_endpoint() { endpoint_for "$(current_port)"; }

# Dispatches the common commands; `install` is the sourcing script's `cmd_install`.
emulator_main() {
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
