"""A Parcae scheduling policy, compiled to a WebAssembly component of world
`full-policy` (see wit/policy.wit) with componentize-py (see build.sh): a
predictor that forecasts how many instances the cloud will leave the job, and
an optimizer that picks a parallel layout (data-parallel degree D x pipeline
depth P) per interval.

As written it is Parcae's reactive baseline: a persistence forecast (the fleet
stays as it is) and, every interval, the fastest profiled layout that fits the
instances available (throughput-optimal, ignoring migration costs). Change
`persistence` and `throughput_optimal` to try your own ideas.

componentize-py conventions: an exported interface is a class named after it
(`Predictor`, `Optimizer`); records are dataclasses with snake_case fields; a
`result<T, string>` is returned as `T`, and `raise Err("...")` returns `err`
(any other exception escaping an export traps the instance); an `option<T>` is
`None` or the value.
"""

from typing import List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.optimizer import OptimizeRequest
from wit_world.exports.predictor import PredictRequest
from wit_world.imports import log
from wit_world.imports.types import ConfigProfile, IntervalStats, ModelProfile, Plan, PlanStep


def size(entry: ConfigProfile) -> int:
    """Instances a layout occupies (D x P)."""
    return entry.config.data_parallel * entry.config.pipeline_stages


def fastest_fitting(profile: ModelProfile, instances: int) -> Optional[ConfigProfile]:
    """The profiled layout with the highest throughput that fits in `instances`;
    ties go to fewer instances, then to the shallower pipeline."""
    best = None
    for entry in profile.configs:
        if size(entry) > instances:
            continue
        key = (entry.samples_per_second, -size(entry), -entry.config.pipeline_stages)
        if best is None or key >= best[0]:
            best = (key, entry)
    return None if best is None else best[1]


def persistence(request: PredictRequest) -> List[IntervalStats]:
    """The next `horizon` intervals look like the last one seen."""
    instances = request.history[-1].instances if request.history else 0
    return [IntervalStats(instances=instances, arrivals=0, preemptions=0) for _ in range(request.horizon)]


def throughput_optimal(request: OptimizeRequest) -> Plan:
    """Per interval, the fastest layout that fits the instances available
    (`instances_now` for the first step, the forecast after), or a pause."""
    seconds = request.interval_ms / 1000.0
    steps = []
    for index, interval in enumerate(request.forecast):
        available = request.instances_now if index == 0 else interval.instances
        entry = fastest_fitting(request.profile, available)
        if entry is None:
            steps.append(PlanStep(config=None, expected_samples=0.0))
        else:
            steps.append(PlanStep(config=entry.config, expected_samples=entry.samples_per_second * seconds))
    return Plan(steps=steps)


class Predictor(exports.Predictor):
    """Export `parcae:policy/predictor`."""

    def predict(self, request: PredictRequest) -> List[IntervalStats]:
        try:
            return persistence(request)
        except Exception as error:  # an escaping exception would trap the instance
            raise Err(f"predict failed: {error!r}")


class Optimizer(exports.Optimizer):
    """Export `parcae:policy/optimizer`."""

    def optimize(self, request: OptimizeRequest) -> Plan:
        try:
            plan = throughput_optimal(request)
        except Exception as error:  # an escaping exception would trap the instance
            raise Err(f"optimize failed: {error!r}")
        first = plan.steps[0].config if plan.steps else None
        if first is not None:
            log.log(log.Level.DEBUG, f"{first.data_parallel}x{first.pipeline_stages} for {request.instances_now} instances")
        return plan
