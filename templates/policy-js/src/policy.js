// A Parcae scheduling policy, compiled to a WebAssembly component of world
// `full-policy` (see wit/policy.wit) with componentize-js (see build.sh): a
// predictor that forecasts how many instances the cloud will leave the job,
// and an optimizer that picks a parallel layout (data-parallel degree D x
// pipeline depth P) per interval.
//
// As written it is Parcae's reactive baseline: a persistence forecast (the
// fleet stays as it is) and, every interval, the fastest profiled layout that
// fits the instances available (throughput-optimal, ignoring migration costs).
// Change `persistence` and `throughputOptimal` to try your own ideas.
//
// componentize-js conventions: an exported interface is an exported object
// named after it (`predictor`, `optimizer`) holding its functions; records are
// plain objects with camelCase fields; `u64` is a BigInt (`intervalMs`), `u32`
// and `f64` are numbers; an `option<T>` is `undefined` or the value; a
// `result<T, string>` is returned as `T`, and a thrown string becomes `err`.

import { log } from 'parcae:policy/log@0.3.0';

// Instances a layout occupies (D x P).
function size(entry) {
  return entry.config.dataParallel * entry.config.pipelineStages;
}

// The profiled layout with the highest throughput that fits in `instances`
// (undefined when none); ties go to fewer instances, then to the shallower pipeline.
function fastestFitting(profile, instances) {
  let best;
  for (const entry of profile.configs) {
    if (size(entry) > instances) continue;
    const better =
      best === undefined ||
      entry.samplesPerSecond > best.samplesPerSecond ||
      (entry.samplesPerSecond === best.samplesPerSecond &&
        (size(entry) < size(best) ||
          (size(entry) === size(best) && entry.config.pipelineStages <= best.config.pipelineStages)));
    if (better) best = entry;
  }
  return best;
}

// The next `horizon` intervals look like the last one seen.
function persistence(request) {
  const history = request.history;
  const instances = history.length > 0 ? history[history.length - 1].instances : 0;
  return Array.from({ length: request.horizon }, () => ({ instances, arrivals: 0, preemptions: 0 }));
}

// Per interval, the fastest layout that fits the instances available
// (`instancesNow` for the first step, the forecast after), or a pause.
function throughputOptimal(request) {
  const seconds = Number(request.intervalMs) / 1000;
  const steps = request.forecast.map((interval, index) => {
    const available = index === 0 ? request.instancesNow : interval.instances;
    const entry = fastestFitting(request.profile, available);
    if (entry === undefined) return { config: undefined, expectedSamples: 0 };
    return { config: entry.config, expectedSamples: entry.samplesPerSecond * seconds };
  });
  return { steps };
}

// Export `parcae:policy/predictor`.
export const predictor = {
  predict(request) {
    try {
      return persistence(request);
    } catch (error) {
      throw `predict failed: ${error}`;
    }
  },
};

// Export `parcae:policy/optimizer`.
export const optimizer = {
  optimize(request) {
    let plan;
    try {
      plan = throughputOptimal(request);
    } catch (error) {
      throw `optimize failed: ${error}`;
    }
    const first = plan.steps.length > 0 ? plan.steps[0].config : undefined;
    if (first !== undefined) {
      log('debug', `${first.dataParallel}x${first.pipelineStages} for ${request.instancesNow} instances`);
    }
    return plan;
  },
};
