#!/usr/bin/env bash
# Sets up a fresh machine, builds the host and the worker in release mode and
# runs the main job on the embedded defaults: a local cluster of worker
# processes on loopback training the built-in small GPT while the embedded
# demo trace (8 instances, one hour) is replayed in accelerated time (4 s per
# minute of trace, --wall-seconds-per-interval), with the embedded default policy (guarded-liveput) planning each
# interval. Extra arguments go to `parcae-host run` (see --help).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
scripts/setup.sh
cargo build --release --locked -p parcae-host -p parcae-worker
exec target/release/parcae-host run "$@"
