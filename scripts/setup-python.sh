#!/usr/bin/env bash
# Creates (if missing) the project's Python virtual environment at $REPO/.venv and
# installs the pinned packages of scripts/requirements-python.txt into it.
# Idempotent: a second run with everything already at the pinned versions only
# checks and exits. Needs python3 (3.11+) with the venv module and pip.
#
# Usage: scripts/setup-python.sh            (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
VENV="$REPO/.venv"
REQUIREMENTS="$SCRIPT_DIR/requirements-python.txt"
PYTHON="${PYTHON:-python3}"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup-python: '$PYTHON' not found; install Python 3.11+ (Debian: apt-get install python3 python3-venv)" >&2
    exit 1
fi

# Serialize concurrent runs (parallel test builds) on a lock of this directory.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$SCRIPT_DIR"
    flock 9
fi

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        echo "setup-python: '$PYTHON' lacks the venv/ensurepip modules needed to create $VENV;" >&2
        echo "setup-python: on Debian install them with: apt-get install python3-venv" >&2
        exit 1
    fi
    echo "setup-python: creating virtual environment $VENV"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
fi

VPY="$VENV/bin/python"

# Which pinned requirements are missing or at another version? (exact `name==version` pins only)
missing="$("$VPY" - "$REQUIREMENTS" <<'PY'
import sys
from importlib import metadata
out = []
for raw in open(sys.argv[1], encoding="utf-8"):
    line = raw.split("#", 1)[0].strip()
    if not line:
        continue
    name, sep, version = line.partition("==")
    if not sep:
        out.append(line)  # not an exact pin: always hand it to pip
        continue
    name = name.split("[", 1)[0]  # `pkg[extra]==v`: the distribution is `pkg`
    try:
        if metadata.version(name.strip()) != version.strip():
            out.append(line)
    except metadata.PackageNotFoundError:
        out.append(line)
print(" ".join(out))
PY
)"

if [ -z "$missing" ]; then
    echo "setup-python: $VENV is up to date"
    exit 0
fi

echo "setup-python: installing $missing"
"$VPY" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
echo "setup-python: done ($VENV)"
