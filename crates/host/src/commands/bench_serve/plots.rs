//! The SVG of one trace's serving benchmark, drawn with [`crate::svg`]: (a)
//! the latency CDF of every row, with the SLO marked; (b) instances available
//! and the instances each row's configuration used over time; (c) each row's
//! replica shape (GPUs per replica) over time.

use super::ServeBench;
use crate::svg::{Area, PALETTE, Side, Svg, Swatch, step_path, ticks};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 80.0;
const PLOT_WIDTH: f64 = 760.0;
const LEGEND_X: f64 = LEFT + PLOT_WIDTH + 30.0;
const TOP: f64 = 70.0;
const PANEL: f64 = 240.0;
const GAP: f64 = 80.0;
const PANEL_C: f64 = 160.0;

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn label(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Sorted end-to-end latencies (s) of a row's completed requests.
fn latencies(outcome: &parcae_serve_sim::ServeOutcome) -> Vec<f64> {
    let mut out: Vec<f64> = outcome
        .requests
        .iter()
        .filter_map(|r| r.done_ms.map(|done| (done - r.arrival_ms) / 1000.0))
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// The SVG document for `bench`.
pub fn plot(bench: &ServeBench, model: &str) -> String {
    let top_b = TOP + PANEL + GAP;
    let height = (top_b + 2.0 * PANEL + GAP + 60.0).max(TOP + 40.0 + 22.0 * (bench.rows.len() as f64 + 2.0));
    let mut svg = Svg::new(WIDTH, height, Some(".title { font-size: 14px; font-weight: bold; }"));
    let name = bench.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    svg.text(
        LEFT,
        TOP - 40.0,
        r#"font-size="16" font-weight="bold""#,
        &format!("{name} — serving {model} at {:.3} req/s, SLO {:.1} s", bench.rate, bench.slo_ms / 1000.0),
    );

    // (a) latency CDF, up to the largest P99.9 of any row (a few stragglers would
    // otherwise squash every curve to the left).
    let all: Vec<Vec<f64>> = bench.rows.iter().map(|r| latencies(&r.outcome)).collect();
    let x_max = all
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| l[((l.len() as f64 * 0.999) as usize).min(l.len() - 1)])
        .fold(bench.slo_ms / 1000.0, f64::max)
        .max(1e-3)
        * 1.05;
    let area_a = Area { left: LEFT, top: TOP, width: PLOT_WIDTH, height: PANEL };
    let xa = |v: f64| LEFT + PLOT_WIDTH * (v / x_max).min(1.0);
    let ya = |f: f64| TOP + PANEL * (1.0 - f);
    svg.text(LEFT, TOP - 10.0, r#"class="title""#, "(a) end-to-end latency of completed requests (CDF)");
    for v in ticks(0.0, 1.0, 5.0) {
        svg.y_tick(area_a, ya(v), &label(v), Side::Left, true);
    }
    for v in ticks(0.0, x_max, 10.0) {
        svg.x_tick(area_a, xa(v), &label(v), 16.0, true);
    }
    svg.x_title(area_a, 34.0, "latency (s)");
    svg.vertical_text(LEFT - 50.0, TOP + PANEL / 2.0, "fraction of requests");
    svg.line(
        (xa(bench.slo_ms / 1000.0), TOP),
        (xa(bench.slo_ms / 1000.0), TOP + PANEL),
        r##"stroke="#000000" stroke-dasharray="4 3""##,
    );
    svg.text(xa(bench.slo_ms / 1000.0) + 4.0, TOP + 12.0, "", "SLO");
    for (i, l) in all.iter().enumerate() {
        if l.is_empty() {
            continue;
        }
        // At most ~800 points per curve.
        let stride = (l.len() / 800).max(1);
        let n = l.len() as f64;
        let mut points = vec![(xa(0.0), ya(0.0))];
        points.extend(l.iter().enumerate().step_by(stride).map(|(k, v)| (xa(*v), ya((k + 1) as f64 / n))));
        points.push((xa(l[l.len() - 1]), ya(1.0)));
        svg.polyline(&points, &format!(r#"fill="none" stroke="{}" stroke-width="1.8""#, colour(i)));
    }
    svg.frame(area_a);

    // (b) instances over time.
    let intervals = bench.instances.len().max(1);
    let n_max = bench.instances.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.05;
    let area_b = Area { left: LEFT, top: top_b, width: PLOT_WIDTH, height: PANEL };
    let xb = |k: f64| LEFT + PLOT_WIDTH * k / intervals as f64;
    let yb = |v: f64| top_b + PANEL * (1.0 - v / n_max);
    svg.text(
        LEFT,
        top_b - 10.0,
        r#"class="title""#,
        "(b) instances available and used by each row's configuration",
    );
    for v in ticks(0.0, n_max, 5.0) {
        svg.y_tick(area_b, yb(v), &label(v), Side::Left, true);
    }
    let hours = intervals as f64 * bench.interval_ms as f64 / 3_600_000.0;
    for h in ticks(0.0, hours, 10.0) {
        svg.x_tick(area_b, xb(h * 3_600_000.0 / bench.interval_ms as f64), &label(h), 16.0, true);
    }
    svg.x_title(area_b, 34.0, "time (hours)");
    svg.vertical_text(LEFT - 50.0, top_b + PANEL / 2.0, "instances");
    let available: Vec<f64> = bench.instances.iter().map(|&n| f64::from(n)).collect();
    svg.path(&step_path(&available, xb, yb), r##"fill="none" stroke="#bbbbbb" stroke-width="4""##);
    for (i, row) in bench.rows.iter().enumerate() {
        let used: Vec<f64> = row.outcome.intervals.iter().map(|r| f64::from(r.instances_used)).collect();
        let offset = (i as f64 - (bench.rows.len() as f64 - 1.0) / 2.0) * 1.4;
        svg.path(
            &step_path(&used, xb, |v| yb(v) + offset),
            &format!(r#"fill="none" stroke="{}" stroke-width="1.6""#, colour(i)),
        );
    }
    svg.frame(area_b);

    // (c) the replica shape over time: GPUs per replica (tp x pp) and batch size.
    let top_c = top_b + PANEL + GAP;
    let shapes: Vec<Vec<f64>> = bench
        .rows
        .iter()
        .map(|row| {
            row.outcome
                .intervals
                .iter()
                .map(|r| r.config.map_or(0.0, |c| f64::from(c.gpus_per_replica())))
                .collect()
        })
        .collect();
    let g_max = shapes.iter().flatten().copied().fold(1.0, f64::max) * 1.1;
    let area_c = Area { left: LEFT, top: top_c, width: PLOT_WIDTH, height: PANEL_C };
    let yc = |v: f64| top_c + PANEL_C * (1.0 - v / g_max);
    svg.text(
        LEFT,
        top_c - 10.0,
        r#"class="title""#,
        "(c) configuration: GPUs per replica (tp x pp); 0 = not serving",
    );
    for v in ticks(0.0, g_max, 5.0) {
        svg.y_tick(area_c, yc(v), &label(v), Side::Left, true);
    }
    for h in ticks(0.0, hours, 10.0) {
        svg.x_tick(area_c, xb(h * 3_600_000.0 / bench.interval_ms as f64), &label(h), 16.0, true);
    }
    svg.x_title(area_c, 34.0, "time (hours)");
    svg.vertical_text(LEFT - 50.0, top_c + PANEL_C / 2.0, "GPUs per replica");
    for (i, values) in shapes.iter().enumerate() {
        let offset = (i as f64 - (bench.rows.len() as f64 - 1.0) / 2.0) * 1.4;
        svg.path(
            &step_path(values, xb, |v| yc(v) + offset),
            &format!(r#"fill="none" stroke="{}" stroke-width="1.6""#, colour(i)),
        );
    }
    svg.frame(area_c);

    // Legend.
    let swatch = Swatch { width: 28.0, gap: 8.0 };
    svg.text(LEGEND_X, TOP - 10.0, r#"class="title""#, "legend");
    svg.legend_entry(
        (LEGEND_X, TOP + 10.0),
        swatch,
        r##"stroke="#bbbbbb" stroke-width="4""##,
        "available (b)",
    );
    for (i, row) in bench.rows.iter().enumerate() {
        svg.legend_entry(
            (LEGEND_X, TOP + 34.0 + 22.0 * i as f64),
            swatch,
            &format!(r#"stroke="{}" stroke-width="3""#, colour(i)),
            &row.name,
        );
    }
    svg.finish()
}
