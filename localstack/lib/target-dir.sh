#!/usr/bin/env bash
# Prints cargo's target directory for the kit's workspace, absolute, as cargo resolves it:
# CARGO_TARGET_DIR (relative: to the workspace root, where every kit tool runs cargo), else
# `build.target-dir` of a `.cargo/config.toml`, else <repo>/target. `cargo metadata --no-deps`
# compiles nothing and reads no registry. Without cargo (a machine that only deploys zips), the
# same rule without the config files. The Makefile exports the answer as CARGO_TARGET_DIR, so
# what it runs (cargo, cargo lambda, host-zips.sh, counterctl and its local runner, the e2e
# tests) looks for the kit's builds where cargo puts them; host-zips.sh and local-runner.sh
# ask it when run by hand.
set -euo pipefail

# Physical, as make's CURDIR is, so that the Makefile can show the path relative to it.
REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$REPO_ROOT"
# Where rustup puts cargo, often not on a fresh shell's PATH: a fallback
# after the cargo on PATH.
PATH="$PATH:${CARGO_HOME:-${HOME:-}/.cargo}/bin"
if command -v cargo >/dev/null 2>&1 &&
    dir=$(cargo metadata --no-deps --format-version 1 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null) &&
    [[ -n "$dir" ]]; then
    printf '%s\n' "$dir"
else
    dir="${CARGO_TARGET_DIR:-target}"
    [[ "$dir" == /* ]] || dir="$REPO_ROOT/$dir"
    printf '%s\n' "$dir"
fi
