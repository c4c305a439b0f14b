#!/usr/bin/env bash
# Sets up a fresh machine and runs every test of the workspace: unit tests,
# end-to-end tests (guest components, the Python policy, the sandbox's
# containment of hostile guests) and the benchmarks in test mode.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
scripts/setup.sh
echo "test: setup took $SECONDS s"
export PARCAE_VENV="$REPO/.venv"
cargo test --workspace --all-targets --locked "$@"
