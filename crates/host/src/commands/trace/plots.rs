//! `parcae-host trace stats --plot DIR`: the characterisation a user reads
//! before trusting a fleet, drawn with [`crate::svg`]:
//!
//! - `<trace>-lifetimes.svg`: the distribution of instance lifetimes, as the
//!   Kaplan-Meier estimate (which counts the instances still alive at the end
//!   as "at least this long" instead of dropping them) and the plain empirical
//!   CDF of the lifetimes that ended within the trace;
//! - `<trace>-preemptions-by-hour.svg`: preemptions in each hour of the trace
//!   (bars) and the preemption rate per instance-hour in that hour (line), with
//!   the whole trace's rate for reference.
//!
//! Hours are hours since the start of the trace: the published traces carry
//! no wall-clock time.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use parcae_traces::{EventKind, HOUR_MS, Lifetime, Trace};
use serde::Serialize;

use crate::svg::{Area, Side, Svg, Swatch, escape, ticks};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 70.0;
const PLOT_HEIGHT: f64 = 340.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
/// The plot area of both figures.
const AREA: Area = Area { left: LEFT, top: TOP, width: PLOT_WIDTH, height: PLOT_HEIGHT };

/// One step of an estimated CDF: from `at_ms` on, `P(lifetime <= t) = cdf`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CdfStep {
    /// Lifetime, ms.
    pub at_ms: u64,
    /// Fraction of instances whose lifetime is at most `at_ms`.
    pub cdf: f64,
}

/// Kaplan-Meier estimate of the lifetime CDF, `1 - S(t)`: at each time `t`
/// when `d` instances end among the `n` whose (ended or censored) lifetime is
/// at least `t`, `S` is multiplied by `1 - d / n`. Censored lifetimes count as
/// at risk up to and including their last observed time.
pub fn kaplan_meier(lifetimes: &[Lifetime]) -> Vec<CdfStep> {
    let mut ended: Vec<u64> = lifetimes.iter().filter(|l| !l.censored).map(|l| l.duration_ms).collect();
    ended.sort_unstable();
    let mut all: Vec<u64> = lifetimes.iter().map(|l| l.duration_ms).collect();
    all.sort_unstable();
    let mut survival = 1.0;
    let mut steps = Vec::new();
    let mut i = 0;
    while i < ended.len() {
        let t = ended[i];
        let deaths = ended[i..].iter().take_while(|&&x| x == t).count();
        let at_risk = all.len() - all.partition_point(|&x| x < t);
        if at_risk > 0 {
            survival *= 1.0 - deaths as f64 / at_risk as f64;
        }
        steps.push(CdfStep { at_ms: t, cdf: 1.0 - survival });
        i += deaths;
    }
    steps
}

/// Empirical CDF of the lifetimes that ended within the trace.
pub fn ended_cdf(lifetimes: &[Lifetime]) -> Vec<CdfStep> {
    let mut ended: Vec<u64> = lifetimes.iter().filter(|l| !l.censored).map(|l| l.duration_ms).collect();
    ended.sort_unstable();
    let n = ended.len() as f64;
    let mut steps: Vec<CdfStep> = Vec::new();
    for (i, t) in ended.iter().enumerate() {
        let cdf = (i + 1) as f64 / n;
        match steps.last_mut() {
            Some(last) if last.at_ms == *t => last.cdf = cdf,
            _ => steps.push(CdfStep { at_ms: *t, cdf }),
        }
    }
    steps
}

/// One hour of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HourRate {
    /// Hour since the start of the trace (0-based).
    pub hour: usize,
    /// Removals in `[hour, hour + 1)`.
    pub preemptions: u32,
    /// Instance-hours alive in that hour (less than 1 x fleet for a last, partial hour).
    pub instance_hours: f64,
    /// `preemptions / instance_hours` (`None` when nothing was alive).
    pub rate_per_instance_hour: Option<f64>,
}

/// Preemptions and exposure per hour of the trace.
pub fn hourly(trace: &Trace) -> Vec<HourRate> {
    let end = trace.end_ms();
    let hours = end.div_ceil(HOUR_MS) as usize;
    let mut exposure = vec![0.0f64; hours];
    let mut preemptions = vec![0u32; hours];
    // Integrates `alive` over [from, to) into the hours it spans.
    let mut spread = |alive: i64, from: u64, to: u64| {
        let mut t = from;
        while t < to {
            let h = (t / HOUR_MS) as usize;
            let next = ((h as u64 + 1) * HOUR_MS).min(to);
            if let Some(slot) = exposure.get_mut(h) {
                *slot += alive.max(0) as f64 * (next - t) as f64 / HOUR_MS as f64;
            }
            t = next;
        }
    };
    let mut alive = 0i64;
    let mut last = 0u64;
    for e in trace.events() {
        spread(alive, last, e.t_ms);
        last = e.t_ms;
        match e.kind {
            EventKind::Add => alive += 1,
            EventKind::Remove => {
                alive -= 1;
                let h = ((e.t_ms / HOUR_MS) as usize).min(hours.saturating_sub(1));
                if let Some(slot) = preemptions.get_mut(h) {
                    *slot += 1;
                }
            }
        }
    }
    spread(alive, last, end);
    (0..hours)
        .map(|h| HourRate {
            hour: h,
            preemptions: preemptions[h],
            instance_hours: exposure[h],
            rate_per_instance_hour: (exposure[h] > 0.0).then(|| f64::from(preemptions[h]) / exposure[h]),
        })
        .collect()
}

/// Writes both plots of `trace` into `dir` (created if missing); returns their paths.
pub fn write_plots(trace: &Trace, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stem =
        trace.source().file_stem().map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
    let stem: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let mut written = Vec::new();
    for (suffix, text) in [("lifetimes", lifetime_svg(trace)), ("preemptions-by-hour", hourly_svg(trace))] {
        let path = dir.join(format!("{stem}-{suffix}.svg"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn number(v: f64) -> String {
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A document with the figure's title and subtitle.
fn header(title: &str, subtitle: &str) -> Svg {
    let mut svg = Svg::new(WIDTH, HEIGHT, None);
    svg.raw(format_args!(
        r#"<text x="{LEFT:.1}" y="28" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    ));
    svg.raw(format_args!(r##"<text x="{LEFT:.1}" y="48" fill="#555">{}</text>"##, escape(subtitle)));
    svg
}

/// The horizontal axis over `[min, max]`: ticks, grid (if `grid`), title.
fn x_axis(svg: &mut Svg, max: f64, label: &str, map: impl Fn(f64) -> f64, grid: bool) {
    for v in ticks(0.0, max, 10.0) {
        svg.x_tick(AREA, map(v), &number(v), 18.0, grid);
    }
    svg.x_title(AREA, 40.0, label);
}

/// A vertical axis over `[0, max]` on `side`: ticks, grid (if `grid`), title.
fn y_axis(svg: &mut Svg, max: f64, label: &str, map: impl Fn(f64) -> f64, side: Side, grid: bool) {
    for v in ticks(0.0, max, 5.0) {
        svg.y_tick(AREA, map(v), &number(v), side, grid);
    }
    let x = match side {
        Side::Left => LEFT - 55.0,
        Side::Right => LEFT + PLOT_WIDTH + 60.0,
    };
    svg.vertical_text(x, TOP + PLOT_HEIGHT / 2.0, label);
}

/// The legend below the plot: (colour, dash, text) entries in a row.
fn legend(svg: &mut Svg, entries: &[(&str, &str, &str)]) {
    let y0 = TOP + PLOT_HEIGHT + 62.0;
    let mut x = LEFT;
    for (colour, dash, text) in entries {
        let style = format!(r#"stroke="{colour}" stroke-width="3" stroke-dasharray="{dash}""#);
        svg.legend_entry((x, y0), Swatch { width: 26.0, gap: 6.0 }, &style, text);
        x += 40.0 + 7.0 * text.len() as f64;
    }
}

/// Step path of a CDF over `[0, x_max]` hours.
fn cdf_path(steps: &[CdfStep], x: &impl Fn(f64) -> f64, y: &impl Fn(f64) -> f64, x_max: f64) -> String {
    let mut d = format!("M{:.1},{:.1}", x(0.0), y(0.0));
    for s in steps {
        let _ = write!(d, "H{:.1}V{:.1}", x(s.at_ms as f64 / HOUR_MS as f64), y(s.cdf));
    }
    let _ = write!(d, "H{:.1}", x(x_max));
    d
}

/// The lifetime CDF plot of `trace`.
pub fn lifetime_svg(trace: &Trace) -> String {
    let lifetimes = trace.lifetimes();
    let km = kaplan_meier(&lifetimes);
    let ended = ended_cdf(&lifetimes);
    let censored = lifetimes.iter().filter(|l| l.censored).count();
    let inferred =
        if trace.node_ids_inferred() { "; node ids inferred (LIFO), lifetimes assumed" } else { "" };
    let mut svg = header(
        &format!("{}: instance lifetimes", trace.name()),
        &format!(
            "{} instances, {} preempted within the trace, {censored} still alive at its end ({:.1} h){inferred}",
            lifetimes.len(),
            lifetimes.len() - censored,
            trace.end_ms() as f64 / HOUR_MS as f64
        ),
    );
    let x_max = (lifetimes.iter().map(|l| l.duration_ms).max().unwrap_or(0) as f64 / HOUR_MS as f64).max(0.1);
    let x = |h: f64| LEFT + PLOT_WIDTH * h / x_max;
    let y = |p: f64| TOP + PLOT_HEIGHT - PLOT_HEIGHT * p;
    x_axis(&mut svg, x_max, "lifetime (hours)", x, true);
    y_axis(&mut svg, 1.0, "fraction of instances preempted by then (CDF)", y, Side::Left, true);
    svg.path(
        &cdf_path(&ended, &x, &y, x_max),
        r##"fill="none" stroke="#f28e2b" stroke-width="2" stroke-dasharray="6 3""##,
    );
    svg.path(&cdf_path(&km, &x, &y, x_max), r##"fill="none" stroke="#4e79a7" stroke-width="2.2""##);
    // Censoring marks on the Kaplan-Meier curve.
    for l in lifetimes.iter().filter(|l| l.censored) {
        let h = l.duration_ms as f64 / HOUR_MS as f64;
        let at = km.iter().take_while(|s| s.at_ms <= l.duration_ms).last().map_or(0.0, |s| s.cdf);
        let (px, py) = (x(h), y(at));
        svg.line((px, py - 5.0), (px, py + 5.0), r##"stroke="#4e79a7" stroke-width="1.2""##);
    }
    // Median of the Kaplan-Meier estimate, where it is reached.
    if let Some(m) = km.iter().find(|s| s.cdf >= 0.5) {
        let h = m.at_ms as f64 / HOUR_MS as f64;
        svg.line((x(0.0), y(0.5)), (x(h), y(0.5)), r##"stroke="#999" stroke-dasharray="3 3""##);
        svg.text(x(h) + 6.0, y(0.5) + 16.0, r##"fill="#333""##, &format!("median {h:.2} h"));
    }
    svg.frame(AREA);
    legend(
        &mut svg,
        &[
            ("#4e79a7", "", "all instances, Kaplan-Meier (| = still alive at the end)"),
            ("#f28e2b", "6 3", "only those preempted within the trace"),
        ],
    );
    svg.finish()
}

/// The preemptions-by-hour plot of `trace`.
pub fn hourly_svg(trace: &Trace) -> String {
    let hours = hourly(trace);
    let total: u32 = hours.iter().map(|h| h.preemptions).sum();
    let exposure: f64 = hours.iter().map(|h| h.instance_hours).sum();
    let overall = if exposure > 0.0 { f64::from(total) / exposure } else { 0.0 };
    let mut svg = header(
        &format!("{}: preemptions by hour of the trace", trace.name()),
        &format!(
            "{total} preemptions over {exposure:.1} instance-hours: {overall:.3} per instance-hour, {:.1} per hour",
            if hours.is_empty() { 0.0 } else { f64::from(total) / (trace.end_ms() as f64 / HOUR_MS as f64) }
        ),
    );
    let n = hours.len().max(1) as f64;
    let count_max = hours.iter().map(|h| h.preemptions).max().unwrap_or(0).max(1) as f64 * 1.1;
    let rate_max =
        hours.iter().filter_map(|h| h.rate_per_instance_hour).fold(overall, f64::max).max(1e-3) * 1.1;
    let x = |h: f64| LEFT + PLOT_WIDTH * h / n;
    let y_count = |v: f64| TOP + PLOT_HEIGHT - PLOT_HEIGHT * v / count_max;
    let y_rate = |v: f64| TOP + PLOT_HEIGHT - PLOT_HEIGHT * v / rate_max;
    x_axis(&mut svg, n, "hour since the start of the trace", x, false);
    y_axis(&mut svg, count_max, "preemptions in the hour (bars)", y_count, Side::Left, true);
    y_axis(&mut svg, rate_max, "preemptions per instance-hour (line)", y_rate, Side::Right, false);
    for h in &hours {
        let (x0, x1) = (x(h.hour as f64) + 2.0, x(h.hour as f64 + 1.0) - 2.0);
        let top = y_count(f64::from(h.preemptions));
        svg.rect(x0, top, (x1 - x0).max(0.5), TOP + PLOT_HEIGHT - top, r##"fill="#a0cbe8""##);
    }
    let mut points = Vec::new();
    for h in &hours {
        if let Some(r) = h.rate_per_instance_hour {
            let point = (x(h.hour as f64 + 0.5), y_rate(r));
            points.push(point);
            svg.circle(point, 3.0, r##"fill="#e15759""##);
        }
    }
    svg.polyline(&points, r##"fill="none" stroke="#e15759" stroke-width="2""##);
    svg.line(
        (LEFT, y_rate(overall)),
        (LEFT + PLOT_WIDTH, y_rate(overall)),
        r##"stroke="#e15759" stroke-dasharray="5 4""##,
    );
    svg.frame(AREA);
    legend(
        &mut svg,
        &[
            ("#a0cbe8", "", "preemptions in the hour"),
            ("#e15759", "", "per instance-hour"),
            ("#e15759", "5 4", "whole trace, per instance-hour"),
        ],
    );
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifetime(duration_h: f64, censored: bool) -> Lifetime {
        Lifetime {
            node: "n".into(),
            start_ms: 0,
            duration_ms: (duration_h * HOUR_MS as f64) as u64,
            censored,
        }
    }

    #[test]
    fn kaplan_meier_counts_censored_instances_as_at_risk() {
        // Ended at 1 h and 3 h, one censored at 2 h, one at 4 h.
        let l = [lifetime(1.0, false), lifetime(2.0, true), lifetime(3.0, false), lifetime(4.0, true)];
        let km = kaplan_meier(&l);
        // t = 1 h: 1 of 4 at risk ends: S = 3/4. t = 3 h: 1 of 2 at risk: S = 3/8.
        assert_eq!(km.len(), 2);
        assert_eq!(km[0], CdfStep { at_ms: HOUR_MS, cdf: 0.25 });
        assert_eq!(km[1], CdfStep { at_ms: 3 * HOUR_MS, cdf: 1.0 - 0.375 });
        // Ended only: 1 h -> 0.5, 3 h -> 1.
        let e = ended_cdf(&l);
        assert_eq!(e, vec![CdfStep { at_ms: HOUR_MS, cdf: 0.5 }, CdfStep { at_ms: 3 * HOUR_MS, cdf: 1.0 }]);
        // Without censoring both agree.
        let l = [lifetime(1.0, false), lifetime(1.0, false), lifetime(2.0, false)];
        assert_eq!(kaplan_meier(&l), ended_cdf(&l));
    }

    #[test]
    fn hourly_exposure_and_rates() {
        // 2 nodes from 0; one leaves at 1.5 h; trace ends at 2.5 h.
        let csv = "0,add,a\n0,add,b\n5400000,remove,a\n9000000,add,c\n";
        let trace = parcae_traces::parse(Path::new("t.csv"), csv.as_bytes(), None).unwrap();
        let hours = hourly(&trace);
        assert_eq!(hours.len(), 3);
        assert_eq!(hours[0].instance_hours, 2.0);
        assert_eq!(hours[1].preemptions, 1);
        assert!((hours[1].instance_hours - 1.5).abs() < 1e-12);
        assert!((hours[1].rate_per_instance_hour.unwrap() - 1.0 / 1.5).abs() < 1e-12);
        // The trace ends at its last event (2.5 h): half an hour with 2 alive.
        assert!((hours[2].instance_hours - 0.5).abs() < 1e-12, "{hours:?}");
        let svg = hourly_svg(&trace);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("1 preemptions over 4.0 instance-hours"), "{svg}");
        let svg = lifetime_svg(&trace);
        assert!(svg.contains("3 instances, 1 preempted within the trace, 2 still alive"), "{svg}");
    }
}
