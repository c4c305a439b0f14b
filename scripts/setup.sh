#!/usr/bin/env bash
# Installs what building and testing Parcae needs on a fresh machine, then exits.
# Idempotent: safe to run before every build.
#   - the wasm32-wasip2 Rust target (guest policies are built for it)
#   - a Python venv in .venv with componentize-py (the Python example policy)
#   - componentize-js in tools/componentize-js/node_modules (the JavaScript policies; needs Node.js 18+)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust 1.95+ with rustup first" >&2
    exit 1
fi
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "setup: adding the wasm32-wasip2 Rust target"
    rustup target add wasm32-wasip2
fi
"$REPO/scripts/setup-python.sh"
"$REPO/scripts/setup-js.sh"
