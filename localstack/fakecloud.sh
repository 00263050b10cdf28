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
VERSION_FILE="$SCRIPT_DIR/fakecloud.version"

EMULATOR=fakecloud
HEALTH_PATH=/_fakecloud/health
DEFAULT_PORT="${FAKECLOUD_PORT:-4566}"
START_TIMEOUT="${FAKECLOUD_START_TIMEOUT:-30}"
FAKECLOUD="${FAKECLOUD_BIN:-fakecloud}"

# `cargo install` puts binaries here; it is often not on a fresh shell's PATH.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

# shellcheck source=localstack/lib/emulator.sh
source "$SCRIPT_DIR/lib/emulator.sh"

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

runnable() {
    command -v "$FAKECLOUD" >/dev/null 2>&1 ||
        die "'$FAKECLOUD' not found; run 'make tools' or '$0 install'"
}

launch() {
    nohup "$FAKECLOUD" --addr "$HOST:$1" </dev/null >>"$2" 2>&1 &
    printf '%s\n' "$!"
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
    log "note: this compiles ~800 crates once per machine, unoptimised (opt-level 0,"
    log "      256 codegen units, no debug info): see localstack/README.md for the measured times"
    # The emulator only serves test traffic: compile time matters more than
    # its speed (opt-level 0 takes 2.3x less CPU than 1; localstack/README.md). Each setting can still be overridden from the environment.
    # Built in cargo install's own temporary directory, never the kit's target
    # directory: without the CARGO_TARGET_DIR the Makefile exports for the
    # kit's builds (a registry install reads no .cargo/config.toml of the
    # current directory, only $CARGO_HOME's).
    env -u CARGO_TARGET_DIR \
        CARGO_PROFILE_RELEASE_OPT_LEVEL="${CARGO_PROFILE_RELEASE_OPT_LEVEL:-0}" \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS="${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-256}" \
        CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-0}" \
        CARGO_PROFILE_RELEASE_INCREMENTAL=false \
        cargo install fakecloud --locked --version "$pin"
    have=$(installed_version)
    [[ "$have" == "$pin" ]] ||
        die "after cargo install, '$FAKECLOUD --version' reports '${have:-nothing}', expected $pin (check PATH)"
    log "fakecloud $pin installed ($(command -v "$FAKECLOUD"))"
}

emulator_main "$@"
