// Reactive throughput-optimal policy for Parcae, written in JavaScript.
//
// Implements world `full-policy` of `parcae:policy@0.3.0` (wit/policy.wit) and is
// compiled to a WebAssembly component with componentize-js (see build.sh). It is
// the JavaScript twin of the Rust baseline (crates/policy-core/src/reactive.rs:
// `Persistence` + `ThroughputOptimal`) and answers the same requests with
// bit-identical plans:
//
// * predictor (persistence): `horizon` intervals, each with the `instances` of
//   the last history entry (0 when the history is empty), no arrivals, no
//   preemptions.
// * optimizer (reactive throughput-optimal): for each forecast step, the
//   profiled layout with the highest samples-per-second that fits the instances
//   available (`instancesNow` for step 0, the forecast's `instances` after), ties
//   broken by fewer instances (D*P), then by fewer pipeline stages, then by the
//   later entry; pauses where nothing fits.
//
// componentize-js conventions used here: an exported interface is an exported
// object named after it (`predictor`, `optimizer`) holding its functions;
// records are plain objects with camelCase fields; `u64` is a BigInt, `u32` and
// `f64` are numbers; an `option<T>` is `undefined` or the value; a
// `result<T, string>` is returned as `T`, and a thrown string becomes `err`.

import { log } from 'parcae:policy/log@0.3.0';

const view = new DataView(new ArrayBuffer(8));

// A BigInt that sorts like Rust's `f64::total_cmp` (IEEE 754 totalOrder):
// -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN.
function totalOrderKey(value) {
  view.setFloat64(0, value);
  const bits = view.getBigInt64(0);
  return bits < 0n ? bits ^ 0x7fffffffffffffffn : bits;
}

// Compares two candidate entries; positive when `a` is the better one.
function compare(a, b) {
  const ka = totalOrderKey(a.samplesPerSecond);
  const kb = totalOrderKey(b.samplesPerSecond);
  if (ka !== kb) return ka > kb ? 1 : -1;
  const sa = BigInt(a.config.dataParallel) * BigInt(a.config.pipelineStages);
  const sb = BigInt(b.config.dataParallel) * BigInt(b.config.pipelineStages);
  if (sa !== sb) return sa < sb ? 1 : -1;
  return b.config.pipelineStages - a.config.pipelineStages;
}

// The fastest profiled layout that fits in `instances` (undefined when none).
// Like Rust's `Iterator::max_by`, the last of several equal candidates wins.
export function bestConfigFor(profile, instances) {
  let best;
  for (const entry of profile.configs) {
    const size = BigInt(entry.config.dataParallel) * BigInt(entry.config.pipelineStages);
    if (size > BigInt(instances)) continue;
    if (best === undefined || compare(entry, best) >= 0) best = entry;
  }
  return best;
}

// The forecast of the persistence predictor.
export function persistence(request) {
  const history = request.history;
  const instances = history.length > 0 ? history[history.length - 1].instances : 0;
  const forecast = [];
  for (let i = 0; i < request.horizon; i++) {
    forecast.push({ instances, arrivals: 0, preemptions: 0 });
  }
  return forecast;
}

// The plan of the reactive throughput-optimal optimizer.
export function throughputOptimal(request) {
  const seconds = Number(request.intervalMs) / 1000;
  const steps = request.forecast.map((interval, index) => {
    const available = index === 0 ? request.instancesNow : interval.instances;
    const chosen = bestConfigFor(request.profile, available);
    if (chosen === undefined) return { config: undefined, expectedSamples: 0 };
    return { config: chosen.config, expectedSamples: chosen.samplesPerSecond * seconds };
  });
  return { steps };
}

function describe(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

// Export `parcae:policy/predictor@0.3.0`.
export const predictor = {
  predict(request) {
    try {
      return persistence(request);
    } catch (error) {
      throw `js persistence predictor failed: ${describe(error)}`;
    }
  },
};

// Export `parcae:policy/optimizer@0.3.0`.
export const optimizer = {
  optimize(request) {
    let plan;
    try {
      plan = throughputOptimal(request);
    } catch (error) {
      throw `js throughput-optimal optimizer failed: ${describe(error)}`;
    }
    const first = plan.steps.length > 0 ? plan.steps[0].config : undefined;
    const chosen = first === undefined ? 'pause' : `${first.dataParallel}x${first.pipelineStages}`;
    log('debug', `chose ${chosen} for ${request.instancesNow} instances (${plan.steps.length} steps planned)`);
    return plan;
  },
};
