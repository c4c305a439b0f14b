//! The SVG of one trace's benchmark, drawn with [`crate::svg`]: (a) instances
//! available, (b) instances each decision maker used (D x P, step plot), (c)
//! cumulative expected samples.

use super::score::{TraceBench, instances};
use crate::record::RowKind;
use crate::svg::{Area, PALETTE, Side, Svg, Swatch, step_path, ticks};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 90.0;
const PLOT_WIDTH: f64 = 760.0;
const LEGEND_X: f64 = LEFT + PLOT_WIDTH + 30.0;
const TOP: f64 = 50.0;
const GAP: f64 = 60.0;
const PANEL_A: f64 = 150.0;
const PANEL_B: f64 = 190.0;
const PANEL_C: f64 = 240.0;

/// Dash patterns cycled after the palette is used up.
const DASHES: [&str; 3] = ["", "6 3", "2 2"];

struct Style {
    colour: &'static str,
    dash: &'static str,
    width: f64,
}

fn style(index: usize, is_ideal: bool) -> Style {
    if is_ideal {
        return Style { colour: "#000000", dash: "4 3", width: 1.5 };
    }
    Style {
        colour: PALETTE[index % PALETTE.len()],
        dash: DASHES[(index / PALETTE.len()) % DASHES.len()],
        width: 1.8,
    }
}

/// `1234567` -> `1.23M`, `45000` -> `45k`.
fn si(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    let (v, suffix) = if value.abs() >= 1e9 {
        (value / 1e9, "G")
    } else if value.abs() >= 1e6 {
        (value / 1e6, "M")
    } else if value.abs() >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

/// The horizontal axis: intervals mapped to pixels, labelled in minutes or hours.
struct TimeAxis {
    intervals: usize,
    interval_ms: u64,
}

impl TimeAxis {
    fn x(&self, interval: f64) -> f64 {
        LEFT + PLOT_WIDTH * interval / self.intervals.max(1) as f64
    }

    fn total_minutes(&self) -> f64 {
        self.intervals as f64 * self.interval_ms as f64 / 60_000.0
    }

    /// (unit label, minutes per unit)
    fn unit(&self) -> (&'static str, f64) {
        if self.total_minutes() > 180.0 { ("hours", 60.0) } else { ("minutes", 1.0) }
    }

    /// Ticks (with grid lines) under the panel `area`; the axis title if `label`.
    fn ticks(&self, svg: &mut Svg, area: Area, label: bool) {
        let (unit, per_unit) = self.unit();
        let span = self.total_minutes() / per_unit;
        let minutes_per_interval = self.interval_ms as f64 / 60_000.0;
        for t in ticks(0.0, span, 10.0) {
            svg.x_tick(area, self.x(t * per_unit / minutes_per_interval), &si(t), 16.0, true);
        }
        if label {
            svg.x_title(area, 34.0, &format!("time ({unit})"));
        }
    }
}

/// The vertical mapping of one panel: values in `[min, max]` onto its height.
#[derive(Clone, Copy)]
struct Scale {
    top: f64,
    height: f64,
    min: f64,
    max: f64,
}

impl Scale {
    /// A scale over `[min, max]` with a little headroom above `max`, so lines
    /// at the maximum stay inside the frame.
    fn new(top: f64, height: f64, min: f64, max: f64) -> Scale {
        let max = if max > min { max } else { min + 1.0 };
        Scale { top, height, min, max: max + (max - min) * 0.05 }
    }

    fn y(&self, v: f64) -> f64 {
        self.top + self.height - self.height * (v - self.min) / (self.max - self.min)
    }

    /// The panel's area.
    fn area(&self) -> Area {
        Area { left: LEFT, top: self.top, width: PLOT_WIDTH, height: self.height }
    }
}

/// Title, y ticks and grid of one panel.
fn panel(svg: &mut Svg, scale: Scale, title: &str, y_label: &str) {
    let area = scale.area();
    svg.text(LEFT, area.top - 10.0, r#"class="title""#, title);
    for v in ticks(scale.min, scale.max, 5.0) {
        svg.y_tick(area, scale.y(v), &si(v), Side::Left, true);
    }
    svg.vertical_text(LEFT - 58.0, area.top + area.height / 2.0, y_label);
}

/// The SVG document for `bench`.
pub fn plot(bench: &TraceBench, model: &str) -> String {
    let series = &bench.series.intervals;
    let axis = TimeAxis { intervals: series.len(), interval_ms: bench.series.interval_ms };
    let x = |k: f64| axis.x(k);
    let top_a = TOP + 20.0;
    let top_b = top_a + PANEL_A + GAP;
    let top_c = top_b + PANEL_B + GAP;
    let height = top_c + PANEL_C + 60.0;
    let legend_rows = bench.rows.len() as f64;
    let height = height.max(top_b + 24.0 * legend_rows + 40.0);
    let mut svg = Svg::new(WIDTH, height, Some(".title { font-size: 14px; font-weight: bold; }"));
    svg.text(
        LEFT,
        TOP - 15.0,
        r#"font-size="16" font-weight="bold""#,
        &format!(
            "{} — {} — {} intervals of {} s",
            bench.name,
            model,
            series.len(),
            bench.series.interval_ms / 1000
        ),
    );

    // (a) instances available.
    let n_max = series.iter().map(|s| s.instances).max().unwrap_or(0).max(1) as f64;
    let scale_a = Scale::new(top_a, PANEL_A, 0.0, n_max);
    let y_a = |v: f64| scale_a.y(v);
    panel(&mut svg, scale_a, "(a) instances available", "instances");
    axis.ticks(&mut svg, scale_a.area(), false);
    let available: Vec<f64> = instances(series).into_iter().map(f64::from).collect();
    let path = step_path(&available, x, y_a);
    svg.path(&format!("{path}V{:.1}H{:.1}Z", y_a(0.0), axis.x(0.0)), r##"fill="#dbe7f3" stroke="none""##);
    svg.path(&path, r##"fill="none" stroke="#4e79a7" stroke-width="1.8""##);
    svg.frame(scale_a.area());

    // (b) instances used (D x P) per decision maker.
    let scale_b = Scale::new(top_b, PANEL_B, 0.0, n_max);
    let y_b = |v: f64| scale_b.y(v);
    panel(&mut svg, scale_b, "(b) instances used by the chosen layout (D x P)", "instances");
    axis.ticks(&mut svg, scale_b.area(), false);
    svg.path(
        &step_path(&available, x, y_b),
        r##"fill="none" stroke="#bbbbbb" stroke-width="4" stroke-opacity="0.6""##,
    );
    let drawn: Vec<usize> = (0..bench.rows.len()).filter(|&i| bench.rows[i].name != "ideal").collect();
    let count = drawn.len() as f64;
    for (j, &i) in drawn.iter().enumerate() {
        let row = &bench.rows[i];
        let used: Vec<f64> =
            row.result.intervals.iter().map(|r| r.config.map_or(0.0, |c| c.instances() as f64)).collect();
        // Spread overlapping lines apart by a pixel or so.
        let offset = (j as f64 - (count - 1.0) / 2.0) * 1.6;
        let s = style(i, false);
        svg.path(
            &step_path(&used, x, |v| y_b(v) + offset),
            &format!(
                r#"fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}" stroke-opacity="0.9""#,
                s.colour, s.width, s.dash
            ),
        );
    }
    svg.frame(scale_b.area());

    // (c) cumulative expected samples.
    let cumulative: Vec<Vec<f64>> = bench.rows.iter().map(|r| r.result.cumulative_samples()).collect();
    // Net samples can dip below zero when a restart rolls work back.
    let s_max = cumulative.iter().flatten().copied().fold(0.0, f64::max).max(1.0);
    let s_min = cumulative.iter().flatten().copied().fold(0.0, f64::min);
    let scale_c = Scale::new(top_c, PANEL_C, s_min, s_max);
    let y_c = |v: f64| scale_c.y(v);
    panel(&mut svg, scale_c, "(c) cumulative expected samples (net of rolled-back work)", "samples");
    axis.ticks(&mut svg, scale_c.area(), true);
    for (i, (row, cum)) in bench.rows.iter().zip(&cumulative).enumerate() {
        let s = style(i, row.name == "ideal");
        let mut points = vec![(axis.x(0.0), y_c(0.0))];
        points.extend(cum.iter().enumerate().map(|(k, v)| (axis.x(k as f64 + 1.0), y_c(*v))));
        svg.polyline(
            &points,
            &format!(
                r#"fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}""#,
                s.colour, s.width, s.dash
            ),
        );
    }
    svg.frame(scale_c.area());

    // Legend.
    let swatch = Swatch { width: 28.0, gap: 8.0 };
    svg.text(LEGEND_X, top_b - 10.0, r#"class="title""#, "legend");
    svg.legend_entry(
        (LEGEND_X, top_b + 10.0),
        swatch,
        r##"stroke="#bbbbbb" stroke-width="4" stroke-opacity="0.6""##,
        "available (b)",
    );
    for (i, row) in bench.rows.iter().enumerate() {
        let s = style(i, row.name == "ideal");
        let tag = if row.kind == RowKind::Policy { " (policy)" } else { "" };
        svg.legend_entry(
            (LEGEND_X, top_b + 34.0 + 22.0 * i as f64),
            swatch,
            &format!(r#"stroke="{}" stroke-width="3" stroke-dasharray="{}""#, s.colour, s.dash),
            &format!("{}{tag}", row.name),
        );
    }
    svg.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_suffixes() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(45_000.0), "45k");
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(2.5), "2.5");
    }
}
