#!/usr/bin/env python3
"""The default policy under cost constants it was never chosen on, scored by `parcae-host bench`.

Why: every setting of the default was chosen with the constants of the
Parcae artifact (`data/profiles/cost-constants.json`: a 10 Gb/s network,
EBS-speed checkpoints every 30 minutes). A cluster with slower storage, a
slower network, faster everything or rarer checkpoints prices migrations,
restarts and rollbacks differently, and a policy whose hedges only pay at
the artifact's prices would lose there. This sweep writes one variant of
the constants per such cluster (below, each a change of the artifact's
figures by a round factor, nothing fitted), then benches the default in the
Wasm sandbox against every baseline and peer on every trace in
`data/traces` (the public AWS and SkyPilot traces and the synthetic stress
shapes), GPT-1.5B, GPT-6.7B and BERT, unannounced and with AWS's notice,
and reports per case the default's share of the Oracle, the best other row,
any row above the Oracle and whether the guest fell back.

Standard library only. Usage, from the repository root after `cargo build
--release -p parcae-host`:

    python3 scripts/held-out-constants.py --jobs 2 --out target/held-out-constants

`--variants artifact --interval-seconds 300` holds out the control interval
instead (the table's is 60 s), at the artifact's constants. It writes the
variants, one JSON report per case and `cases.csv` under `--out`, and prints
a summary per variant and notice. A case whose report is
already there is read, not run again (delete `--out` to start afresh).
"""

import argparse
import copy
import csv
import glob
import json
import os
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from bench_scores import score


MODELS = ["gpt-1.5b", "gpt-6.7b", "bert"]
NOTICES_S = ["0", "120"]
BASE = "data/profiles/cost-constants.json"


def scale_rebuilds(constants, factor):
    """Every communicator rebuild `factor` times as long (its constant kept)."""
    rules = list(constants["comm_rebuild"]["models"].values()) + [constants["comm_rebuild"]["default"]]
    for rule in rules:
        for key in ("per_group_add_ms", "per_group_remove_ms", "add_ms_per_instance", "remove_ms_per_instance"):
            if key in rule:
                rule[key] *= factor
        if "ms" in rule:
            rule["ms"] = [ms * factor for ms in rule["ms"]]


# Each variant: why, the fields it sets, and how many times as long every
# communicator rebuild takes.
VARIANTS = {
    "slow-storage": (
        "Network disks at a quarter of EBS's speed: restarts, emergency and periodic checkpoints dearer.",
        {"checkpoint_write_gb_per_s": 0.05, "checkpoint_save_load_ms": 40_000, "checkpoint_snapshot_gb_per_s": 2},
        1,
    ),
    "slow-net": (
        "A 2.5 Gb/s network: all-reduce 4x slower, communicator rebuilds 3x longer.",
        {"allreduce_gb_per_s": 0.3125},
        3,
    ),
    "fast": (
        "A 40 Gb/s network and local NVMe: every move and restart cheaper.",
        {"allreduce_gb_per_s": 5.0, "checkpoint_save_load_ms": 5_000, "checkpoint_write_gb_per_s": 1.0},
        1,
    ),
    "rare-ckpt": (
        "A job that checkpoints every 2 h: an unannounced loss rolls back more.",
        {"checkpoint_interval_ms": 7_200_000},
        1,
    ),
    "artifact": ("The artifact's constants unchanged (to hold out something else, such as the interval).", {}, 1),
}
# What a run scores unless `--variants` says otherwise: every change.
DEFAULT_VARIANTS = ["slow-storage", "slow-net", "fast", "rare-ckpt"]


def write_variants(out):
    """Writes each variant of the artifact's constants under `out`; returns their paths."""
    with open(BASE) as f:
        base = json.load(f)
    paths = {}
    for name, (why, fields, rebuilds) in VARIANTS.items():
        constants = copy.deepcopy(base)
        constants.update(fields)
        scale_rebuilds(constants, rebuilds)
        constants["source"] = f"{name}: {why} Derived from {BASE} by scripts/held-out-constants.py."
        paths[name] = os.path.join(out, f"constants-{name}.json")
        with open(paths[name], "w") as f:
            json.dump(constants, f, indent=1)
    return paths


def traces():
    """Every trace in `data/traces` with the profile its instances were profiled as."""
    found = ["data/traces/aws-p3/p3-events.csv", "data/traces/aws-g4dn/g4dn-events.csv"]
    found += sorted(glob.glob("data/traces/skypilot/*.json")) + sorted(glob.glob("data/traces/synthetic/*.csv"))
    return [(t, "data/profiles/g4dn-t4-derived.json" if "g4dn" in t else "data/profiles/p3-v100-parcae.json")
            for t in found]


def run_case(host, out, constants, case):
    """Benches one case (or reads its report); returns its CSV row."""
    row = dict(case)
    name = "--".join([case["constants"], os.path.basename(case["trace"]), case["model"], case["notice_s"]])
    name += f"--{case['interval_s']}s"
    report = os.path.join(out, name + ".json")
    if not os.path.exists(report):
        bench = [host, "bench", "--cost-constants", constants[case["constants"]], "--trace", case["trace"]]
        bench += ["--profile", case["profile"], "--model", case["model"], "--notice-seconds", case["notice_s"]]
        bench += ["--interval-seconds", case["interval_s"], "--json", report + ".part"]
        done = subprocess.run(bench, capture_output=True, text=True)
        if done.returncode:
            row["error"] = "bench: " + done.stderr.strip()[-300:]
            return row
        os.replace(report + ".part", report)
    with open(report) as f:
        records = {record["policy"]: record for record in json.load(f)}
    row.update(score(records))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="cases benched at once")
    parser.add_argument("--out", default="target/held-out-constants", help="folder for variants, reports, cases.csv")
    parser.add_argument("--host", default="target/release/parcae-host", help="the parcae-host binary")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--interval-seconds", default="60", help="the control interval of every case (bench's default 60)")
    args = parser.parse_args()
    if not args.interval_seconds.isdigit() or int(args.interval_seconds) == 0:
        sys.exit(f"--interval-seconds {args.interval_seconds!r}: expected a positive whole number of seconds")
    if not os.path.exists(args.host):
        sys.exit(f"{args.host}: not found (cargo build --release -p parcae-host)")
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        sys.exit(f"--variants: {', '.join(unknown)}: not a variant (known: {', '.join(VARIANTS)})")
    os.makedirs(args.out, exist_ok=True)
    constants = write_variants(args.out)
    cases = [
        {"constants": v, "trace": t, "profile": p, "model": m, "notice_s": n, "interval_s": args.interval_seconds}
        for v in chosen
        for t, p in traces()
        for m in MODELS
        for n in NOTICES_S
    ]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda case: run_case(args.host, args.out, constants, case), cases))
    fields = ["constants", "trace", "profile", "model", "notice_s", "interval_s", "default_of_oracle", "best_other_row"]
    fields += ["best_other_of_oracle", "default_over_best", "above_oracle", "fallbacks", "faults", "error"]
    path = os.path.join(args.out, "cases.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} cases written to {path}; errors: {sum('error' in r for r in rows)}")
    scored = [r for r in rows if "error" not in r and r["default_over_best"] != ""]
    groups = defaultdict(list)
    for r in scored:
        groups[(r["constants"], r["notice_s"])].append(r)
    print("| constants | notice s | cases | behind | worst / best other | mean / best other "
          "| below 97% of the Oracle | of them, the best other row not | lowest % of the Oracle | fallbacks |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (v, n), g in sorted(groups.items(), key=lambda kv: (chosen.index(kv[0][0]), int(kv[0][1]))):
        ratios = [r["default_over_best"] for r in g]
        below = [r for r in g if r["default_of_oracle"] < 0.97]
        print(f"| {v} | {n} | {len(g)} | {sum(x < 1.0 for x in ratios)} | {min(ratios):.4f} "
              f"| {sum(ratios) / len(ratios):.4f} | {len(below)} "
              f"| {sum(r['best_other_of_oracle'] >= 0.97 for r in below)} "
              f"| {100 * min(r['default_of_oracle'] for r in g):.1f} | {sum(r['fallbacks'] for r in g)} |")
    print(f"a row above the Oracle: {[(r['constants'], r['trace'], r['model'], r['notice_s'], r['above_oracle']) for r in rows if r.get('above_oracle')]}")
    for r in scored:
        if r["default_over_best"] < 1.0 or r["default_of_oracle"] < 0.97:
            print(f"  {r['constants']} {os.path.basename(r['trace'])} {r['model']} notice {r['notice_s']} s: "
                  f"{100 * r['default_of_oracle']:.1f}% of the Oracle, {r['default_over_best']} of "
                  f"{r['best_other_row']} ({100 * r['best_other_of_oracle']:.1f}%)")


if __name__ == "__main__":
    main()
