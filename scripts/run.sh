#!/usr/bin/env bash
# Sets up a fresh machine, builds the host in release mode and runs the main job
# on the embedded defaults: the demo trace, the example profile and the
# reactive policy component. Extra arguments go to `parcae-host replay`.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
scripts/setup.sh
cargo build --release --locked -p parcae-host
exec target/release/parcae-host replay "$@"
