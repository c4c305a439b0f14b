"""How the sweeps score one `parcae-host bench --json` report, shared so that
every sweep compares the default with the same rows by the same rules.

Standard library only; imported by `minute-fleets.py` and
`held-out-constants.py` (a script's own folder is on Python's path).
"""

POLICY = "builtin:guarded-liveput"
# Rows that are bounds, references or sensitivity rows, not systems the
# default is held against (as in `crates/sim/examples/generalisation.rs`).
NOT_COMPARED = {"ideal", "oracle", "on-demand", "liveput-truth", "artifact", "bamboo-slow", POLICY}
# A row this far above the Oracle breaks "the same rules for every row".
ABOVE_TOLERANCE = 1.0005


def score(records):
    """The default's scores in one report (`records`: policy name -> record):
    its share of the Oracle, the best other row and the default over it, any
    row above the Oracle, and the guest's fallbacks and faults."""
    samples = {name: record["samples"] for name, record in records.items()}
    oracle = samples.get("oracle", 0.0)
    share = (lambda v: v / oracle) if oracle > 0 else (lambda v: 0.0)
    others = {name: v for name, v in samples.items() if name not in NOT_COMPARED}
    best_name = max(others, key=others.get) if others else ""
    best = others.get(best_name, 0.0)
    ours = records[POLICY]
    above = [n for n, v in samples.items() if n not in ("ideal", "oracle", "on-demand")]
    return {
        "default_of_oracle": round(share(samples[POLICY]), 4),
        "best_other_row": best_name,
        "best_other_of_oracle": round(share(best), 4),
        "default_over_best": round(samples[POLICY] / best, 4) if best > 0 else "",
        "above_oracle": ";".join(n for n in above if oracle > 0 and samples[n] > oracle * ABOVE_TOLERANCE),
        "fallbacks": (ours.get("predictor_fallbacks") or 0) + (ours.get("optimizer_fallbacks") or 0),
        "faults": ours.get("policy_faults") or 0,
    }
