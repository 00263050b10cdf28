#!/usr/bin/env bash
# Package the handlers for an emulator that runs them on this machine (ministack executes a
# `provided.*` function's `bootstrap` itself, with no container): a debug build for this host,
# stripped, one `<dir>/<package>/bootstrap.zip` per handler, the layout `counterctl deploy
# --artifacts-dir <dir>` reads. It shares target/debug with `cargo build` and `make test`, so
# it costs seconds once those ran, where the arm64 release build (`make build`) costs ~20 CPU-min.
#
#   localstack/host-zips.sh [DIR]     default DIR: <target>/lambda-host
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
TARGET_DIR=$("$SCRIPT_DIR/lib/target-dir.sh")
OUT="${1:-$TARGET_DIR/lambda-host}"

# Every directory under handlers/ is a Lambda package named as the
# directory, whose binary has the package's name (the Makefile's rule;
# localstack/runner/src/binaries.rs checks it against cargo metadata).
shopt -s nullglob
mapfile -t packages < <(for manifest in "$REPO_ROOT"/handlers/*/Cargo.toml; do
    basename -- "$(dirname -- "$manifest")"
done)
((${#packages[@]})) || { echo "host-zips.sh: error: no handler packages under handlers/" >&2; exit 1; }

# `--bin` of each handler, never `-p`: with the whole workspace selected,
# cargo resolves the same features as `make e2e`'s `cargo build --bins` and
# the runner's build, so this finds the binaries fresh. `-p` selects other
# features, recompiles the SDK crates (minutes on a fresh machine, holding
# the build lock while emulator tests wait on it) and overwrites the
# binaries the runner starts.
args=()
for package in "${packages[@]}"; do args+=(--bin "$package"); done
(cd "$REPO_ROOT" && cargo build --locked -q "${args[@]}")

for package in "${packages[@]}"; do
    mkdir -p "$OUT/$package"
    staged=$(mktemp -d)
    strip -o "$staged/bootstrap" "$TARGET_DIR/debug/$package"
    python3 - "$staged/bootstrap" "$OUT/$package/bootstrap.zip" <<'PY'
import sys, zipfile
source, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
    info = zipfile.ZipInfo("bootstrap")
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o755 << 16
    with open(source, "rb") as f:
        archive.writestr(info, f.read())
PY
    rm -rf "$staged"
    printf '%s\n' "$OUT/$package/bootstrap.zip"
done
