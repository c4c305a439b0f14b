#!/usr/bin/env python3
"""Random fleets whose instances live minutes, scored by `parcae-host bench`.

Why: the tables in the README come from traces whose instances live hours;
where they live 3-90 minutes a call of the default policy meets many fleet
sizes at once, which is where it ran out of the guest's fuel, and where a
peer was found training more than the Oracle. This sweep draws such fleets
(`trace synth --lifetimes`: 8-80 places living 3-90 minutes, refilled after
0-5 minutes, 2-6 h), a profile, a model, a notice, an interval and a horizon
per case, scores the default policy in the Wasm sandbox against every
baseline and peer, and reports per case the default's share of the Oracle,
the best other row, any row above the Oracle and what the guest's fuel did.

Case k draws from Python's `random.Random(10000 + k)` (stable across Python
versions), so a case is the same fleet on every machine. Standard library
only. Usage, from the repository root after `cargo build --release -p
parcae-host`:

    python3 scripts/minute-fleets.py --cases 0:80 --jobs 2 --out target/minute-fleets

It writes `cases.csv` (one row per case) under `--out` and prints a summary.
"""

import argparse
import csv
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from bench_scores import POLICY, score


def draw(k):
    """The case `k`: its synth arguments and its bench settings."""
    r = random.Random(10000 + k)
    hours = r.choice([2, 4, 6])
    shortest = r.choice([0.05, 0.1, 0.15, 0.25])
    longest = shortest * r.choice([1, 1.5, 3, 6])
    spec = f"{r.randint(8, 80)}:{shortest}-{longest:g}:{r.choice([0, 0.5, 1, 2, 5])}"
    return {
        "case": k,
        "lifetimes": spec,
        "hours": hours,
        "profile": r.choice(["p3-v100-parcae", "g4dn-t4-derived"]),
        "model": r.choice(["gpt-1.5b", "gpt-1.5b", "gpt-6.7b", "bert", "resnet152"]),
        "notice_s": r.choice(["0", "5", "30", "120"]),
        "interval_s": r.choice(["30", "60", "60", "120"]),
        "horizon": r.choice(["4", "8", "8", "16"]),
    }


def run_case(host, out, case):
    """Synthesises and benches one case; returns its CSV row."""
    directory = os.path.join(out, str(case["case"]))
    os.makedirs(directory, exist_ok=True)
    trace = os.path.join(directory, "trace.csv")
    row = dict(case)
    synth = [host, "trace", "synth", "--hours", str(case["hours"]), "--seed", str(case["case"])]
    synth += ["--lifetimes", case["lifetimes"], "-o", trace]
    done = subprocess.run(synth, capture_output=True, text=True)
    if done.returncode:
        row["error"] = "trace synth: " + done.stderr.strip()[-300:]
        return row
    report = os.path.join(directory, "bench.json")
    bench = [host, "bench", "--trace", trace, "--policy", POLICY]
    bench += ["--profile", f"data/profiles/{case['profile']}.json", "--model", case["model"]]
    bench += ["--notice-seconds", case["notice_s"], "--interval-seconds", case["interval_s"]]
    bench += ["--horizon", case["horizon"], "--peers", "all", "--json", report]
    bench += ["--baselines", "ideal,oracle,reactive,reactive-restart,liveput-truth"]
    done = subprocess.run(bench, capture_output=True, text=True)
    if done.returncode:
        row["error"] = "bench: " + done.stderr.strip()[-300:]
        return row
    with open(report) as f:
        records = {record["policy"]: record for record in json.load(f)}
    row.update(score(records))
    ours = records[POLICY]
    heaviest = max(ours.get("predictor_heaviest_fuel") or 0, ours.get("optimizer_heaviest_fuel") or 0)
    budget = ours.get("fuel_per_call") or 0
    row["heaviest_call_of_budget"] = round(heaviest / budget, 4) if budget else ""
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="0:80", help="FIRST:END, cases FIRST..END-1 (default 0:80)")
    parser.add_argument("--jobs", type=int, default=2, help="cases benched at once")
    parser.add_argument("--out", default="target/minute-fleets", help="folder for traces, reports, cases.csv")
    parser.add_argument("--host", default="target/release/parcae-host", help="the parcae-host binary")
    args = parser.parse_args()
    try:
        first, end = (int(x) for x in args.cases.split(":"))
    except ValueError:
        sys.exit(f"--cases {args.cases!r}: expected FIRST:END, two integers")
    if not os.path.exists(args.host):
        sys.exit(f"{args.host}: not found (cargo build --release -p parcae-host)")
    os.makedirs(args.out, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda k: run_case(args.host, args.out, draw(k)), range(first, end)))
    fields = ["case", "lifetimes", "hours", "profile", "model", "notice_s", "interval_s", "horizon"]
    fields += ["default_of_oracle", "best_other_row", "best_other_of_oracle", "default_over_best"]
    fields += ["above_oracle", "fallbacks", "faults", "heaviest_call_of_budget", "error"]
    path = os.path.join(args.out, "cases.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    scored = [r for r in rows if "error" not in r and r["default_over_best"] != ""]
    behind = [r for r in scored if r["default_over_best"] < 0.9995]
    print(f"{len(rows)} cases, {len(scored)} scored (the rest: nothing trains, or an error), written to {path}")
    print(f"errors: {sum('error' in r for r in rows)}")
    print(f"calls answered by the built-in fallback: in {sum(bool(r.get('fallbacks')) for r in rows)} cases "
          f"({sum(bool(r.get('faults')) for r in rows)} with a fault)")
    print(f"a row above the Oracle: {[(r['case'], r['above_oracle']) for r in rows if r.get('above_oracle')]}")
    print(f"below 97% of the Oracle: {sum(r['default_of_oracle'] < 0.97 for r in scored)}, "
          f"the best other row too in {sum(r['default_of_oracle'] < 0.97 and r['best_other_of_oracle'] < 0.97 for r in scored)}")
    listed = "".join(f"; case {r['case']} {r['default_over_best']} ({r['best_other_row']})" for r in behind)
    print(f"behind the best other row: {len(behind)}{listed}")
    print(f"ahead of it by 0.05% or more: {sum(r['default_over_best'] > 1.0005 for r in scored)}")
    heaviest = [r["heaviest_call_of_budget"] for r in rows if r.get("heaviest_call_of_budget") != ""]
    if heaviest:
        print(f"heaviest call of any case: {100 * max(heaviest):.1f}% of the fuel budget")


if __name__ == "__main__":
    main()
