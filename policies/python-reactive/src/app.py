"""Reactive throughput-optimal policy for Parcae, written in Python.

Implements world `full-policy` of `parcae:policy@0.3.0` (wit/policy.wit) and is
compiled to a WebAssembly component with componentize-py (see build.sh). It is the
Python twin of the Rust baseline in policies/core/src/reactive.rs and must answer
the same requests with bit-identical plans:

* predictor (persistence): `horizon` intervals, each with the `instances` of the
  last history entry (0 when the history is empty), no arrivals, no preemptions.
* optimizer (reactive throughput-optimal): for each forecast step, the profiled
  layout with the highest samples-per-second that fits the instances available
  (`instances-now` for step 0, the forecast's `instances` after), ties broken by
  fewer instances (D*P) and then by fewer pipeline stages; pauses where nothing
  fits.

componentize-py 0.25 conventions used here: the exported interfaces are
implemented by classes named after them (`Predictor`, `Optimizer`) in this
module; a `result<T, string>` return is modelled by returning `T` or raising
`componentize_py_types.Err(message)`; records are dataclasses; a (non-nested)
`option<T>` is `None` or the value itself.
"""

import struct
from typing import List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.optimizer import OptimizeRequest
from wit_world.exports.predictor import PredictRequest
from wit_world.imports import log
from wit_world.imports.types import ConfigProfile, IntervalStats, ModelProfile, Plan, PlanStep

_I64_LOW_BITS = 0x7FFF_FFFF_FFFF_FFFF


def total_order_key(value: float) -> int:
    """An integer that sorts like Rust's `f64::total_cmp` (IEEE 754 totalOrder).

    -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN, so the choice agrees with
    the Rust baseline even for NaN or signed zeros in a profile.
    """
    (bits,) = struct.unpack("<q", struct.pack("<d", value))
    return bits ^ _I64_LOW_BITS if bits < 0 else bits


def best_config_for(profile: ModelProfile, instances: int) -> Optional[ConfigProfile]:
    """The fastest profiled layout fitting in `instances` (see module doc for ties).

    Like Rust's `Iterator::max_by`, the last of several equal candidates wins.
    """
    best = None
    best_key = None
    for entry in profile.configs:
        config = entry.config
        size = config.data_parallel * config.pipeline_stages
        if size > instances:
            continue
        # Larger key is better: faster, then fewer instances, then shallower pipeline.
        key = (total_order_key(entry.samples_per_second), -size, -config.pipeline_stages)
        if best_key is None or key >= best_key:
            best, best_key = entry, key
    return best


def persistence(request: PredictRequest) -> List[IntervalStats]:
    """The forecast of the persistence predictor."""
    instances = request.history[-1].instances if request.history else 0
    return [IntervalStats(instances=instances, arrivals=0, preemptions=0) for _ in range(request.horizon)]


def throughput_optimal(request: OptimizeRequest) -> Plan:
    """The plan of the reactive throughput-optimal optimizer."""
    seconds = float(request.interval_ms) / 1000.0
    steps = []
    for index, interval in enumerate(request.forecast):
        available = request.instances_now if index == 0 else interval.instances
        chosen = best_config_for(request.profile, available)
        if chosen is None:
            steps.append(PlanStep(config=None, expected_samples=0.0))
        else:
            steps.append(PlanStep(config=chosen.config, expected_samples=chosen.samples_per_second * seconds))
    return Plan(steps=steps)


def describe(plan: Plan, request: OptimizeRequest) -> str:
    """One line about the first step, for the host's log."""
    if not plan.steps:
        return "empty forecast: empty plan"
    first = plan.steps[0].config
    chosen = "pause" if first is None else f"{first.data_parallel}x{first.pipeline_stages}"
    return f"chose {chosen} for {request.instances_now} instances ({len(plan.steps)} steps planned)"


class Predictor(exports.Predictor):
    """Export `parcae:policy/predictor@0.3.0`: returns the forecast or raises `Err(str)`."""

    def predict(self, request: PredictRequest) -> List[IntervalStats]:
        try:
            return persistence(request)
        except Exception as error:  # never trap the instance: report an `err` instead
            raise Err(f"python persistence predictor failed: {error!r}")


class Optimizer(exports.Optimizer):
    """Export `parcae:policy/optimizer@0.3.0`: returns the plan or raises `Err(str)`."""

    def optimize(self, request: OptimizeRequest) -> Plan:
        try:
            plan = throughput_optimal(request)
            message = describe(plan, request)
        except Exception as error:  # never trap the instance: report an `err` instead
            raise Err(f"python throughput-optimal optimizer failed: {error!r}")
        log.log(log.Level.DEBUG, message)
        return plan
