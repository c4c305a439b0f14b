#!/usr/bin/env bash
# Builds the Python reactive policy into a WebAssembly component (world
# parcae:policy/full-policy@0.3.0) with the pinned componentize-py of
# scripts/requirements-python.txt (installed into $REPO/.venv by
# scripts/setup-python.sh, which this script runs first; it is a no-op when the
# venv is already up to date).
#
# Usage: policies/python-reactive/build.sh [--wasi] [OUTPUT.wasm]
#   OUTPUT.wasm  default: policies/python-reactive/out/python_reactive.wasm
#   --wasi       keep real WASI p2 imports (25 wasi:* interfaces). By default WASI
#                is stubbed (componentize-py --stub-wasi): every WASI import is
#                replaced by a trapping stub and the component imports only
#                parcae:policy/log and parcae:policy/types, which is all the host grants.
#   env SKIP_SETUP=1  do not run scripts/setup-python.sh (the venv must exist)
#
# Equivalent single command, run from the repository root:
#   env -u VIRTUAL_ENV .venv/bin/componentize-py -d wit -w full-policy \
#       componentize app -p policies/python-reactive/src --stub-wasi -o OUTPUT.wasm
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

STUB=(--stub-wasi)
if [ "${1:-}" = "--wasi" ]; then
    STUB=()
    shift
fi
OUTPUT="${1:-$HERE/out/python_reactive.wasm}"
case "$OUTPUT" in /*) ;; *) OUTPUT="$PWD/$OUTPUT" ;; esac

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    "$REPO/scripts/setup-python.sh" >/dev/null
fi

mkdir -p "$(dirname "$OUTPUT")"
cd "$REPO"
# Only this directory is put on the guest's Python path (-p). VIRTUAL_ENV is
# cleared so that componentize-py does not also add some venv's site-packages.
env -u VIRTUAL_ENV .venv/bin/componentize-py --quiet -d wit -w full-policy \
    componentize app -p policies/python-reactive/src "${STUB[@]}" -o "$OUTPUT"
echo "built $OUTPUT ($(stat -c %s "$OUTPUT") bytes)"
