//! Held-out errors: how well the fitted model predicts layouts it was not fitted to (leave one
//! out, and small layouts predicting large ones, which is what the profile does beyond the
//! machine).

use serde::Serialize;

use super::fit::{Observation, PerfModel, fit};

/// One held-out prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeldOut {
    /// Data-parallel degree.
    pub dp: usize,
    /// Pipeline depth.
    pub pp: usize,
    /// Measured step time (median), ms.
    pub measured_ms: f64,
    /// The model's prediction on the profiling machine, fitted without this layout, ms.
    pub predicted_ms: f64,
    /// `(predicted - measured) / measured`.
    pub rel_error: f64,
}

/// Errors of a model on layouts it was not fitted to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HoldoutReport {
    /// How the layouts were held out.
    pub method: String,
    /// Every held-out prediction.
    pub points: Vec<HeldOut>,
    /// Mean of `|rel_error|`.
    pub mean_abs_rel_error: f64,
    /// Largest `|rel_error|`.
    pub max_abs_rel_error: f64,
}

impl HoldoutReport {
    /// Summarises `points` (mean and max of the absolute relative errors).
    pub fn new(method: impl Into<String>, points: Vec<HeldOut>) -> Self {
        let abs: Vec<f64> = points.iter().map(|p| p.rel_error.abs()).collect();
        let mean = if abs.is_empty() { f64::NAN } else { abs.iter().sum::<f64>() / abs.len() as f64 };
        let max = abs.iter().copied().fold(f64::NAN, f64::max);
        HoldoutReport { method: method.into(), points, mean_abs_rel_error: mean, max_abs_rel_error: max }
    }

    /// The held-out point with the largest error.
    pub fn worst(&self) -> Option<&HeldOut> {
        self.points.iter().max_by(|a, b| a.rel_error.abs().total_cmp(&b.rel_error.abs()))
    }
}

fn held_out(model: &PerfModel, o: &Observation) -> HeldOut {
    let predicted_ms = model.predict_shared(&o.features);
    HeldOut {
        dp: o.dp,
        pp: o.pp,
        measured_ms: o.measured_ms,
        predicted_ms,
        rel_error: (predicted_ms - o.measured_ms) / o.measured_ms,
    }
}

/// Fits on every observation but one and predicts that one, for each; `None` with fewer than
/// three observations.
pub fn leave_one_out(obs: &[Observation], max_cores: f64) -> Option<HoldoutReport> {
    if obs.len() < 3 {
        return None;
    }
    let points = (0..obs.len())
        .map(|i| {
            let rest: Vec<Observation> =
                obs.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| *o).collect();
            fit(&rest, max_cores).map(|m| held_out(&m, &obs[i]))
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(HoldoutReport::new(format!("leave-one-out over {} measured layouts", obs.len()), points))
}

/// Fits on the layouts of at most `split` slots and predicts the larger ones (what the profile
/// does beyond the machine); `None` when either side has too few layouts (3 to fit, 1 to test).
pub fn extrapolation(obs: &[Observation], max_cores: f64, split: usize) -> Option<HoldoutReport> {
    let (small, large): (Vec<Observation>, Vec<Observation>) = obs.iter().partition(|o| o.dp * o.pp <= split);
    if small.len() < 3 || large.is_empty() {
        return None;
    }
    let model = fit(&small, max_cores).ok()?;
    let points = large.iter().map(|o| held_out(&model, o)).collect();
    Some(HoldoutReport::new(
        format!("fit on the {} layouts with D*P <= {split}, predict the {} larger", small.len(), large.len()),
        points,
    ))
}

#[cfg(test)]
mod tests {
    use crate::ModelSpec;

    use super::super::fit::fixtures::{TRUE, observations};
    use super::*;

    #[test]
    fn held_out_error_is_measured_on_the_point_left_out() {
        let spec = ModelSpec::default();
        let mut obs = observations(&spec, &TRUE);
        // One measurement 50% too slow: left out, the others pin the true model, so its
        // prediction is the true time, 1/3 below what was "measured".
        let i = obs.iter().position(|o| (o.dp, o.pp) == (2, 2)).unwrap();
        obs[i].measured_ms *= 1.5;
        let loo = leave_one_out(&obs, 4.0).unwrap();
        let p = loo.points.iter().find(|h| (h.dp, h.pp) == (2, 2)).unwrap();
        assert!((p.rel_error + 1.0 / 3.0).abs() < 1e-4, "{p:?}");
        assert_eq!(loo.max_abs_rel_error, p.rel_error.abs());
        assert_eq!(loo.worst().map(|w| (w.dp, w.pp)), Some((2, 2)));
        let mean = loo.points.iter().map(|h| h.rel_error.abs()).sum::<f64>() / loo.points.len() as f64;
        assert!((loo.mean_abs_rel_error - mean).abs() < 1e-15);
        // Summary arithmetic on hand-made points.
        let h = |e: f64| HeldOut {
            dp: 1,
            pp: 1,
            measured_ms: 100.0,
            predicted_ms: 100.0 * (1.0 + e),
            rel_error: e,
        };
        let r = HoldoutReport::new("t", vec![h(0.1), h(-0.3), h(0.2)]);
        assert!((r.mean_abs_rel_error - 0.2).abs() < 1e-12 && (r.max_abs_rel_error - 0.3).abs() < 1e-12);
        // Extrapolation fits only small layouts and tests only large ones.
        let ext = extrapolation(&observations(&spec, &TRUE), 4.0, 4).unwrap();
        assert!(ext.points.iter().all(|h| h.dp * h.pp > 4) && !ext.points.is_empty());
        assert!(leave_one_out(&obs[..2], 4.0).is_none());
    }
}
