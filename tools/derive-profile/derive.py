#!/usr/bin/env python3
"""Derives a profile of another instance type from a measured one and published hardware
figures, with the decomposition of `parcae_policy_core::mixed`: each layout's step is its
busiest replica's GPipe ticks plus its synchronisation,

    iteration(D, P) = (ceil(M / D) + P - 1) * tick(P) + sync(D, P),

tick(P) from the narrowest profiled width at depth P. The derived type runs the ticks
`--compute-ratio` times as fast and the synchronisation and transfers `--network-ratio`
times as fast (transfer latency, the smallest message's time, unchanged). Start-up,
rendezvous and model-build times are kept: they are host-side work.

    python3 tools/derive-profile/derive.py data/profiles/p3-v100-parcae.json \\
        --compute-ratio 0.356 --network-ratio 2.5 --instance-json '{...}' --source '...' \\
        > data/profiles/g4dn-t4-derived.json
"""
import argparse
import json
import math
import sys


def derive(profile, compute_ratio, network_ratio):
    out = json.loads(json.dumps(profile))
    for name, model in out["models"].items():
        m = max(1, model["global_batch_size"] // max(1, model["micro_batch_size"]))
        entries = model["throughput"]
        ticks = {}
        for e in sorted(entries, key=lambda e: e["dp"]):
            p = e["pp"]
            if p not in ticks:
                ticks[p] = e["iteration_ms"] / (math.ceil(m / e["dp"]) + p - 1)
        for e in entries:
            d, p = e["dp"], e["pp"]
            busiest = math.ceil(m / d) + p - 1
            sync = max(0.0, e["iteration_ms"] - busiest * ticks[p])
            iteration = busiest * ticks[p] / compute_ratio + sync / network_ratio
            e["iteration_ms"] = round(iteration, 3)
            e["samples_per_s"] = round(model["global_batch_size"] / (iteration / 1000.0), 3)
    curve = {int(b): us for b, us in out["p2p_us_by_bytes"].items()}
    latency = curve[min(curve)]
    out["p2p_us_by_bytes"] = {
        str(b): round(latency + max(0.0, us - latency) / network_ratio, 3) for b, us in sorted(curve.items())
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--compute-ratio", type=float, required=True)
    ap.add_argument("--network-ratio", type=float, required=True)
    ap.add_argument("--instance-json", required=True, help="the derived type's `instance` object")
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    with open(args.profile) as f:
        profile = json.load(f)
    out = derive(profile, args.compute_ratio, args.network_ratio)
    out["instance"] = json.loads(args.instance_json)
    out["source"] = args.source
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
