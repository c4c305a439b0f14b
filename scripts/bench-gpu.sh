#!/usr/bin/env bash
# GPU training and migration benchmark, beside the same machine's CPU.
#
# On one machine with a CUDA GPU it measures, with the real workers:
#   1. one worker process's step per layout (`parcae-worker profile`) on CUDA, and the
#      single-process step on the CPU for the same model, side by side;
#   2. the deployment on CUDA (`parcae-host profile`): worker processes walked through
#      every layout (step periods with every process alive), every live reconfiguration's
#      wall time (state moved between processes over QUIC with mutual TLS, GPU tensors
#      staged through host memory), a whole-fleet preemption and the restart from its
#      emergency checkpoint, and the checkpoint snapshot and write rates;
#   3. a replay of the demo trace on CUDA (`parcae-host run`) planned with that profile:
#      samples/s, reconfigurations and time migrating by kind, checkpoint overhead.
#
# Usage: scripts/bench-gpu.sh OUT_DIR [BIN_DIR]
#   BIN_DIR holds parcae-host and a parcae-worker linked against a CUDA build of libtorch
#   (default target/release); LD_LIBRARY_PATH must reach that libtorch when the worker's
#   rpath does not. SPEC (default data/specs/gpt-gpu.json), INSTANCES (8),
#   SECONDS_PER_LAYOUT (3) and INTERVALS (15) override the defaults. OUT_DIR receives
#   bench.log (everything printed), summary.json (the reports and the run's summary) and
#   the profile and constants measured on CUDA.
set -euo pipefail
OUT="${1:?usage: scripts/bench-gpu.sh OUT_DIR [BIN_DIR]}"
BIN="${2:-target/release}"
SPEC="${SPEC:-data/specs/gpt-gpu.json}"
INSTANCES="${INSTANCES:-8}"
SECONDS_PER_LAYOUT="${SECONDS_PER_LAYOUT:-3}"
INTERVALS="${INTERVALS:-15}"
WORK="$(mktemp -d)"
mkdir -p "$OUT"
exec > >(tee "$OUT/bench.log") 2>&1

phase() { echo; echo "== $1 (t = ${SECONDS} s)"; }

phase "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "cpus: $(nproc)"

phase "one worker process, CUDA: every layout up to $INSTANCES slots"
"$BIN/parcae-worker" profile --device cuda --spec "$SPEC" --model-name gpt-gpu \
    --max-instances "$INSTANCES" --steps 10 --warmup 2 --json --out "$OUT/worker-profile-cuda.json" \
    >"$WORK/worker-cuda.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r)[:4000])' "$WORK/worker-cuda.json"

phase "one worker process, CPU: the single-slot layout of the same model"
"$BIN/parcae-worker" profile --device cpu --spec "$SPEC" --model-name gpt-gpu \
    --max-instances 1 --steps 2 --warmup 1 --transfer-reps 1 --out "$WORK/worker-profile-cpu.json"

phase "the deployment on CUDA: $INSTANCES worker processes, every layout, reconfigurations, a fleet wipe"
"$BIN/parcae-host" profile --device cuda --spec "$SPEC" --model-name gpt-gpu \
    --worker-bin "$BIN/parcae-worker" --instances "$INSTANCES" \
    --seconds-per-layout "$SECONDS_PER_LAYOUT" --passes 1 \
    --out "$OUT/profile-cuda.json" --constants-out "$OUT/constants-cuda.json" \
    --work-dir "$WORK/profile-cuda" --json "$WORK/report-cuda.json" 2>&1 | grep -v " INFO "

phase "the demo trace on CUDA, planned with that profile ($INTERVALS intervals)"
"$BIN/parcae-host" run --device cuda --spec "$SPEC" --model gpt-gpu \
    --profile "$OUT/profile-cuda.json" --cost-constants "$OUT/constants-cuda.json" \
    --worker-bin "$BIN/parcae-worker" --intervals "$INTERVALS" --run-dir "$WORK/run-cuda" 2>&1 \
    | grep -v " INFO "

phase "summary"
python3 - "$WORK" "$OUT" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
summary = {}
for key, path in [("worker_cuda", f"{work}/worker-cuda.json"),
                  ("profile_cuda", f"{work}/report-cuda.json"),
                  ("run_cuda", f"{work}/run-cuda/events.json")]:
    try:
        data = json.load(open(path))
        summary[key] = data["summary"] if key == "run_cuda" else data
    except (OSError, KeyError, ValueError) as e:
        summary[key] = f"missing: {e}"
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print("wrote", f"{out}/summary.json")
PY
