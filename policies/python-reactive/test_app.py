"""Unit tests of app.py under plain CPython (no WebAssembly involved).

The guest imports the bindings componentize-py generates (`wit_world`,
`componentize_py_types`); they are generated here into ./bindings/ (git-ignored)
when missing. Run from anywhere:

    .venv/bin/python policies/python-reactive/test_app.py

The expectations mirror the Rust tests of policies/core/src/reactive.rs.
"""

import math
import os
import subprocess
import sys
import unittest

# Keep src/ free of __pycache__ (componentize-py bundles what lies on its -p path).
sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BINDINGS = os.path.join(HERE, "bindings")


def ensure_bindings() -> None:
    if not os.path.isdir(os.path.join(BINDINGS, "wit_world")):
        tool = os.path.join(REPO, ".venv", "bin", "componentize-py")
        subprocess.run(
            [tool, "-q", "-d", os.path.join(REPO, "wit"), "-w", "full-policy", "bindings", BINDINGS],
            check=True,
        )
    sys.path[:0] = [BINDINGS, os.path.join(HERE, "src")]


ensure_bindings()

import app  # noqa: E402
from componentize_py_types import Err  # noqa: E402
from wit_world.exports.optimizer import OptimizeRequest  # noqa: E402
from wit_world.exports.predictor import PredictRequest  # noqa: E402
from wit_world.imports import log  # noqa: E402
from wit_world.imports.types import ConfigProfile, IntervalStats, ModelProfile, ParallelConfig, Recovery  # noqa: E402

LOGGED = []
log.log = lambda level, message: LOGGED.append((level, message))  # stand-in for the host import


def entry(d: int, p: int, sps: float) -> ConfigProfile:
    return ConfigProfile(ParallelConfig(d, p), sps, 1000.0, 0.0, 0.0, 0.0)


def profile(configs) -> ModelProfile:
    return ModelProfile("toy", 8, 1, configs, [], [], 0.0, 0.0, 0.0, 0.0)


def request(instances_now, forecast, configs, interval_ms=60_000) -> OptimizeRequest:
    stats = [IntervalStats(n, 0, 0) for n in forecast]
    return OptimizeRequest(stats, instances_now, None, interval_ms, profile(configs), Recovery(120_000.0, 0.0), [])


def chosen(plan):
    return ["pause" if s.config is None else f"{s.config.data_parallel}x{s.config.pipeline_stages}" for s in plan.steps]


class PredictorTest(unittest.TestCase):
    def test_persistence_repeats_last_count(self):
        forecast = app.Predictor().predict(PredictRequest([IntervalStats(7, 2, 1)], 3, 60_000, 0, 32, []))
        self.assertEqual(forecast, [IntervalStats(7, 0, 0)] * 3)

    def test_empty_history_forecasts_zero(self):
        forecast = app.Predictor().predict(PredictRequest([], 2, 60_000, 0, 32, []))
        self.assertEqual(forecast, [IntervalStats(0, 0, 0)] * 2)


class OptimizerTest(unittest.TestCase):
    TOY = [entry(1, 2, 10.0), entry(2, 2, 19.0), entry(1, 4, 12.0), entry(4, 2, 30.0)]

    def test_picks_fastest_layout_that_fits_each_interval(self):
        LOGGED.clear()
        plan = app.Optimizer().optimize(request(4, [5, 8, 3, 1], self.TOY))
        self.assertEqual(chosen(plan), ["2x2", "4x2", "1x2", "pause"])
        self.assertEqual(plan.steps[0].expected_samples, 19.0 * 60.0)
        self.assertEqual(plan.steps[3].expected_samples, 0.0)
        self.assertEqual(LOGGED, [(log.Level.DEBUG, "chose 2x2 for 4 instances (4 steps planned)")])

    def test_ties_go_to_fewer_instances_then_shallower_pipeline(self):
        plan = app.Optimizer().optimize(request(4, [4, 4], [entry(4, 1, 10.0), entry(1, 2, 10.0)]))
        self.assertEqual(chosen(plan), ["1x2", "1x2"])
        plan = app.Optimizer().optimize(request(4, [4], [entry(1, 2, 10.0), entry(2, 1, 10.0)]))
        self.assertEqual(chosen(plan), ["2x1"])

    def test_total_order_like_rust(self):
        # f64::total_cmp: -NaN < -inf < -0.0 < +0.0 < +inf < +NaN.
        plan = app.Optimizer().optimize(request(8, [8], [entry(1, 1, 0.0), entry(1, 2, -0.0)]))
        self.assertEqual(chosen(plan), ["1x1"])
        plan = app.Optimizer().optimize(request(8, [8], [entry(1, 1, math.inf), entry(2, 1, math.nan)]))
        self.assertEqual(chosen(plan), ["2x1"])
        plan = app.Optimizer().optimize(request(8, [8], [entry(1, 1, -math.inf), entry(2, 1, -math.nan)]))
        self.assertEqual(chosen(plan), ["1x1"])

    def test_expected_samples_use_interval_seconds(self):
        plan = app.Optimizer().optimize(request(2, [2], [entry(1, 2, 0.1)], interval_ms=7_777))
        self.assertEqual(plan.steps[0].expected_samples, 0.1 * (7_777 / 1000.0))

    def test_empty_forecast_gives_empty_plan(self):
        self.assertEqual(app.Optimizer().optimize(request(4, [], self.TOY)).steps, [])

    def test_failure_is_an_err_not_a_trap(self):
        broken = request(4, [4], self.TOY)
        broken.profile.configs = None
        with self.assertRaises(Err) as caught:
            app.Optimizer().optimize(broken)
        self.assertIsInstance(caught.exception.value, str)


if __name__ == "__main__":
    unittest.main()
