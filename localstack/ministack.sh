#!/usr/bin/env bash
# Install, start and stop ministack, the token-free LocalStack-compatible emulator (localstack/README.md).
#
#   localstack/ministack.sh install            pip-install the hashed lock into its own venv unless done
#   localstack/ministack.sh start [--port N]   start in the background on 127.0.0.1, wait for health, print endpoint
#   localstack/ministack.sh stop               stop the emulator started by `start` (idempotent)
#   localstack/ministack.sh status             running / not running; exit 0 / 1
#   localstack/ministack.sh endpoint           print the endpoint URL
#   localstack/ministack.sh lock               regenerate ministack.lock from ministack.in (pip-tools)
#
# Environment:
#   MINISTACK_VENV           its virtualenv (default <repo>/.venv-ministack; it pins an exact botocore,
#                            so it never shares the kit's .venv)
#   MINISTACK_PORT           loopback port for `start` (default 4566, LocalStack's edge port)
#   MINISTACK_START_TIMEOUT  seconds `start` waits for the health check (default 30)
#   PYTHON                   the interpreter that creates the venv (default python3)
#
# State lives in <repo>/.run: ministack.pid, ministack.port, ministack.log; the emulator keeps its
# own state in memory only, so every start is a fresh one.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
LOCK_FILE="$SCRIPT_DIR/ministack.lock"
VENV="${MINISTACK_VENV:-$REPO_ROOT/.venv-ministack}"
# The lock's digest, recorded once the venv holds exactly that lock.
STAMP="$VENV/.lock-sha256"

EMULATOR=ministack
HEALTH_PATH=/_ministack/health
DEFAULT_PORT="${MINISTACK_PORT:-4566}"
START_TIMEOUT="${MINISTACK_START_TIMEOUT:-30}"

# shellcheck source=localstack/lib/emulator.sh
source "$SCRIPT_DIR/lib/emulator.sh"

usage() {
    sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

lock_digest() { sha256sum "$LOCK_FILE" | awk '{ print $1 }'; }

installed() { [[ -x "$VENV/bin/ministack" && -f "$STAMP" && "$(cat "$STAMP")" == "$(lock_digest)" ]]; }

runnable() {
    [[ -x "$VENV/bin/ministack" ]] || die "ministack is not installed in $VENV; run 'make tools' or '$0 install'"
}

# ministack extracts every provided.* function's code under its TMPDIR (about 80 MB per
# distinct zip) and never removes it: a directory of its own under .run, emptied at start and
# removed at stop.
MINISTACK_TMP="$RUN_DIR/ministack-tmp"

after_stop() { rm -rf "$MINISTACK_TMP"; }

launch() {
    rm -rf "$MINISTACK_TMP" && mkdir -p "$MINISTACK_TMP"
    # BIND_HOST: ministack listens on every interface unless told otherwise. AWS_ENDPOINT_URL: the
    # functions it runs (their `bootstrap`, on this host) call this emulator back, not AWS.
    TMPDIR="$MINISTACK_TMP" GATEWAY_PORT="$1" BIND_HOST="$HOST" AWS_ENDPOINT_URL="$(endpoint_for "$1")" nohup "$VENV/bin/ministack" </dev/null >>"$2" 2>&1 &
    printf '%s\n' "$!"
}

cmd_install() {
    if installed; then
        log "ministack already installed ($VENV, $(pinned))"
        return 0
    fi
    local python="${PYTHON:-python3}"
    command -v "$python" >/dev/null 2>&1 || die "$python not found; ministack needs Python 3.10 or later"
    [[ -x "$VENV/bin/python" ]] || "$python" -m venv "$VENV"
    # --require-hashes: pip refuses any file whose SHA-256 is not in the lock.
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --require-hashes -r "$LOCK_FILE"
    lock_digest >"$STAMP"
    log "ministack installed ($VENV, $(pinned))"
}

pinned() { awk -F'[= ]+' '/^ministack==/ { print "ministack " $2 }' "$LOCK_FILE"; }

cmd_lock() {
    local tools="$REPO_ROOT/target/pip-tools"
    [[ -x "$tools/bin/pip-compile" ]] || {
        python3 -m venv "$tools" && "$tools/bin/pip" install --disable-pip-version-check -q pip-tools==7.6.2
    }
    (cd "$REPO_ROOT" && "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
        --no-emit-index-url --no-emit-find-links --output-file localstack/ministack.lock localstack/ministack.in)
}

case "${1:-}" in
lock) cmd_lock ;;
*) emulator_main "$@" ;;
esac
