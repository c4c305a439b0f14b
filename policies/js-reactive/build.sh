#!/usr/bin/env bash
# Builds the JavaScript reactive policy into a WebAssembly component (world
# parcae:policy/full-policy@0.3.0) with the pinned componentize-js of
# tools/componentize-js (installed by scripts/setup-js.sh, which this script runs
# first; it is a no-op when node_modules is already up to date).
#
# Usage: policies/js-reactive/build.sh [OUTPUT.wasm]
#   OUTPUT.wasm   default: policies/js-reactive/out/js_reactive.wasm
#   env SKIP_SETUP=1  do not run scripts/setup-js.sh (node_modules must exist)
#
# Equivalent single command, run from the repository root:
#   tools/componentize-js/node_modules/.bin/componentize-js --wit wit --world-name full-policy \
#       --disable http fetch-event -o OUTPUT.wasm policies/js-reactive/src/policy.js
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

OUTPUT="${1:-$HERE/out/js_reactive.wasm}"
case "$OUTPUT" in /*) ;; *) OUTPUT="$PWD/$OUTPUT" ;; esac

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    "$REPO/scripts/setup-js.sh" >/dev/null
fi

mkdir -p "$(dirname "$OUTPUT")"
cd "$REPO"
# `fetch` (wasi:http) is of no use to a policy, which the host grants no network:
# leave it out of the engine rather than import it.
tools/componentize-js/node_modules/.bin/componentize-js --wit wit --world-name full-policy \
    --disable http fetch-event -o "$OUTPUT" policies/js-reactive/src/policy.js
echo "built $OUTPUT ($(stat -c %s "$OUTPUT") bytes)"
