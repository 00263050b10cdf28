# shellcheck shell=bash
# Sourced by localstack/lib/emulator.sh and localstack/local-runner.sh.

# The command line of process $1 (empty when it is gone): what a pidfile's
# pid is checked against, since a pid is reused after its process exits.
process_args() {
    if [[ -r "/proc/$1/cmdline" ]]; then
        tr '\0' ' ' <"/proc/$1/cmdline"
    else
        ps -p "$1" -o args= 2>/dev/null || true
    fi
}
