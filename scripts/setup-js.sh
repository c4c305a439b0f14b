#!/usr/bin/env bash
# Installs the pinned JavaScript-to-component toolchain (componentize-js, see
# tools/componentize-js/package.json and its package-lock.json) into
# tools/componentize-js/node_modules, for the JavaScript policies
# (policies/js-reactive, e2e/fixtures/js-hostile, `parcae-host policy new --lang js`).
# It runs `npm install` on the lock file, which installs exactly the locked
# versions: `npm ci` would refuse this lock, which records the native binaries
# of Linux x64 only (the registry the lock was made from serves no others), as
# "out of sync" with their packages' optional dependencies.
# Idempotent: when node_modules already matches the lock file it only checks and
# exits; npm's cache (~/.npm) makes a reinstall fast and lets scaffolded
# projects' own `npm ci` reuse the downloads. Needs Node.js 18+ and npm.
#
# Usage: scripts/setup-js.sh
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
TOOL="$REPO/tools/componentize-js"
STAMP="$TOOL/node_modules/.parcae-lock.sha256"

for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "setup-js: '$tool' not found; install Node.js 18+ with npm (Debian: apt-get install nodejs npm)" >&2
        exit 1
    fi
done
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
    echo "setup-js: Node.js $(node --version) is too old; componentize-js needs 18 or newer" >&2
    exit 1
fi

# Serialize concurrent runs (parallel test builds) on a lock of this directory.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$SCRIPT_DIR"
    flock 9
fi

want="$(sha256sum "$TOOL/package-lock.json" | cut -d' ' -f1)"
if [ -x "$TOOL/node_modules/.bin/componentize-js" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
    echo "setup-js: $TOOL/node_modules is up to date"
    exit 0
fi

echo "setup-js: installing componentize-js into $TOOL/node_modules"
# `npm install` rewrites the lock when the registry has since published native binaries of
# other platforms; the committed lock (which `policy new --lang js` copies and a test pins)
# must stay as it is, so it is put back whatever npm wrote.
cp "$TOOL/package-lock.json" "$TOOL/.package-lock.json.committed"
trap 'mv -f "$TOOL/.package-lock.json.committed" "$TOOL/package-lock.json"' EXIT
(cd "$TOOL" && npm install --no-audit --no-fund --prefer-offline --loglevel=error)
echo "$want" >"$STAMP"
echo "setup-js: done"
