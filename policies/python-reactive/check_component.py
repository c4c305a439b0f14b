"""Loads the built component with wasmtime-py and checks its shape and answers.

Not part of the build: it needs the `wasmtime` PyPI package (component model
support; tested with wasmtime==50.0.1 and with 48.0.0, the
host's version), e.g. in a scratch venv:

    python3 -m venv /tmp/wt && /tmp/wt/bin/pip install wasmtime==50.0.1
    /tmp/wt/bin/python policies/python-reactive/check_component.py [COMPONENT.wasm]

It lists imports and exports, links only `parcae:policy/log` (plus WASI p2 granting
nothing when the component imports wasi:*), runs predict and optimize on the
cases of the Rust tests in policies/core/src/reactive.rs, and prints the fuel
each call consumed.
"""

import os
import sys

from wasmtime import Config, Engine, Store, WasiConfig
from wasmtime.component import Component, Linker, Record

HERE = os.path.dirname(os.path.abspath(__file__))
PREDICTOR = "parcae:policy/predictor@0.3.0"
OPTIMIZER = "parcae:policy/optimizer@0.3.0"
LOG = "parcae:policy/log@0.3.0"


def rec(**fields):
    """A wasmtime-py record: attribute names are the WIT (kebab-case) field names."""
    value = Record()
    for name, field in fields.items():
        setattr(value, name.replace("_", "-"), field)
    return value


def stats(n):
    return rec(instances=n, arrivals=0, preemptions=0)


def entry(d, p, sps):
    return rec(config=rec(data_parallel=d, pipeline_stages=p), samples_per_second=sps, iteration_ms=1000.0,
               comm_rebuild_add_ms=0.0, comm_rebuild_remove_ms=0.0, model_build_ms=0.0)


def main(path):
    config = Config()
    config.consume_fuel = True
    engine = Engine(config)
    component = Component.from_file(engine, path)
    imports = sorted(component.type.imports(engine))
    exports = sorted(component.type.exports(engine))
    print("imports:", ", ".join(imports))
    print("exports:", ", ".join(exports))
    assert PREDICTOR in exports and OPTIMIZER in exports, "missing policy exports"
    assert LOG in imports, "log is not imported"
    uses_wasi = any(name.startswith("wasi:") for name in imports)

    linker = Linker(engine)
    if uses_wasi:
        linker.add_wasip2()
    logged = []
    with linker.root() as root:
        with root.add_instance(LOG) as log:
            log.add_func("log", lambda store, level, message: logged.append((level, message)))

    store = Store(engine)
    if uses_wasi:
        store.set_wasi(WasiConfig())  # no preopens, stdio, env or network
    store.set_fuel(10**12)
    instance = linker.instantiate(store, component)

    def func(interface, name):
        index = instance.get_export_index(store, interface)
        return instance.get_func(store, instance.get_export_index(store, name, index))

    def call(f, arg):
        before = store.get_fuel()
        result = f(store, arg)
        f.post_return(store)
        return result, before - store.get_fuel()

    predict, optimize = func(PREDICTOR, "predict"), func(OPTIMIZER, "optimize")

    forecast, fuel = call(predict, rec(history=[rec(instances=7, arrivals=2, preemptions=1)], horizon=3,
                                       interval_ms=60_000, fleet_min=0, fleet_max=32))
    got = [(s.instances, s.arrivals, s.preemptions) for s in forecast]
    assert got == [(7, 0, 0)] * 3, got
    print(f"predict ok ({fuel} fuel)")

    profile = rec(model="toy", global_batch_size=8, micro_batch_size=1,
                  configs=[entry(1, 2, 10.0), entry(2, 2, 19.0), entry(1, 4, 12.0), entry(4, 2, 30.0)],
                  partitions=[], transfer_curve=[], rendezvous_ms=0.0, process_start_ms=0.0,
                  checkpoint_restart_ms=0.0, checkpoint_interval_ms=0.0)
    plan, fuel = call(optimize, rec(forecast=[stats(n) for n in (5, 8, 3, 1)], instances_now=4, current=None,
                                    interval_ms=60_000, profile=profile))
    steps = plan.steps
    chosen = ["pause" if s.config is None else f"{getattr(s.config, 'data-parallel')}x{getattr(s.config, 'pipeline-stages')}"
              for s in steps]
    samples = [getattr(s, "expected-samples") for s in steps]
    assert chosen == ["2x2", "4x2", "1x2", "pause"], chosen
    assert samples == [19.0 * 60.0, 30.0 * 60.0, 10.0 * 60.0, 0.0], samples
    assert logged == [("debug", "chose 2x2 for 4 instances (4 steps planned)")], logged
    print(f"optimize ok ({fuel} fuel): {chosen} {samples}")
    print("log:", logged)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "out", "python_reactive.wasm"))
