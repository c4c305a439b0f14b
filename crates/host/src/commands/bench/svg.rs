//! A hand-written SVG of one trace's benchmark: (a) instances available, (b)
//! instances each decision maker used (D x P, step plot), (c) cumulative
//! expected samples. No plotting crate: text into a string.

use std::fmt::{self, Write};

use super::{RowKind, TraceBench};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 90.0;
const PLOT_WIDTH: f64 = 760.0;
const LEGEND_X: f64 = LEFT + PLOT_WIDTH + 30.0;
const TOP: f64 = 50.0;
const GAP: f64 = 60.0;
const PANEL_A: f64 = 150.0;
const PANEL_B: f64 = 190.0;
const PANEL_C: f64 = 240.0;

/// Distinct colours (Tableau 10), assigned to rows in order; Ideal is black.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#bab0ac",
];

/// Dash patterns cycled after the palette is used up.
const DASHES: [&str; 3] = ["", "6 3", "2 2"];

/// The SVG document for `bench`.
pub fn plot(bench: &TraceBench, model: &str) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = draw(&mut out, bench, model);
    out
}

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

/// Text made safe inside SVG markup (shared by every hand-written plot).
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 x 10^k) giving about `target` ticks over `range`.
pub(crate) fn nice_step(range: f64, target: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
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

    fn ticks(&self, out: &mut String, y_top: f64, y_bottom: f64, label: bool) -> fmt::Result {
        let (unit, per_unit) = self.unit();
        let span = self.total_minutes() / per_unit;
        let step = nice_step(span, 10.0);
        let minutes_per_interval = self.interval_ms as f64 / 60_000.0;
        let mut t = 0.0;
        while t <= span + 1e-9 {
            let x = self.x(t * per_unit / minutes_per_interval);
            writeln!(
                out,
                r##"<line x1="{x:.1}" y1="{y_top:.1}" x2="{x:.1}" y2="{y_bottom:.1}" stroke="#e4e4e4"/>"##
            )?;
            writeln!(
                out,
                r##"<line x1="{x:.1}" y1="{y_bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/>"##,
                y_bottom + 4.0
            )?;
            writeln!(
                out,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                y_bottom + 16.0,
                si(t)
            )?;
            t += step;
        }
        if label {
            writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time ({unit})</text>"#,
                LEFT + PLOT_WIDTH / 2.0,
                y_bottom + 34.0
            )?;
        }
        Ok(())
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
}

/// Title, y ticks and grid of one panel.
fn panel(out: &mut String, scale: Scale, title: &str, y_label: &str) -> fmt::Result {
    let Scale { top, height, .. } = scale;
    writeln!(out, r#"<text x="{LEFT:.1}" y="{:.1}" class="title">{}</text>"#, top - 10.0, escape(title))?;
    let step = nice_step(scale.max - scale.min, 5.0);
    let mut v = (scale.min / step).ceil() * step;
    while v <= scale.max + 1e-9 {
        let y = scale.y(v);
        writeln!(
            out,
            r##"<line x1="{LEFT:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/>"##,
            LEFT + PLOT_WIDTH
        )?;
        writeln!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{LEFT:.1}" y2="{y:.1}" stroke="#333"/>"##,
            LEFT - 4.0
        )?;
        writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 7.0,
            y + 4.0,
            si(v)
        )?;
        v += step;
    }
    writeln!(
        out,
        r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        LEFT - 58.0,
        top + height / 2.0,
        escape(y_label)
    )?;
    Ok(())
}

fn frame(out: &mut String, top: f64, height: f64) -> fmt::Result {
    writeln!(
        out,
        r##"<rect x="{LEFT:.1}" y="{top:.1}" width="{PLOT_WIDTH:.1}" height="{height:.1}" fill="none" stroke="#333"/>"##
    )
}

/// Path of a step function: `values[k]` over interval k.
fn step_path(axis: &TimeAxis, values: &[f64], y: impl Fn(f64) -> f64) -> String {
    let mut d = String::new();
    for (k, v) in values.iter().enumerate() {
        let (x0, x1, yv) = (axis.x(k as f64), axis.x(k as f64 + 1.0), y(*v));
        if k == 0 {
            let _ = write!(d, "M{x0:.1},{yv:.1}");
        } else {
            let _ = write!(d, "V{yv:.1}");
        }
        let _ = write!(d, "H{x1:.1}");
    }
    d
}

fn draw(out: &mut String, bench: &TraceBench, model: &str) -> fmt::Result {
    let series = &bench.series.intervals;
    let axis = TimeAxis { intervals: series.len(), interval_ms: bench.series.interval_ms };
    let top_a = TOP + 20.0;
    let top_b = top_a + PANEL_A + GAP;
    let top_c = top_b + PANEL_B + GAP;
    let height = top_c + PANEL_C + 60.0;
    let legend_rows = bench.rows.len() as f64;
    let height = height.max(top_b + 24.0 * legend_rows + 40.0);
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    )?;
    writeln!(out, "<style>.title {{ font-size: 14px; font-weight: bold; }}</style>")?;
    writeln!(out, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##)?;
    writeln!(
        out,
        r#"<text x="{LEFT:.1}" y="{:.1}" font-size="16" font-weight="bold">{} — {} — {} intervals of {} s</text>"#,
        TOP - 15.0,
        escape(&bench.name),
        escape(model),
        series.len(),
        bench.series.interval_ms / 1000
    )?;

    // (a) instances available.
    let n_max = series.iter().map(|s| s.instances).max().unwrap_or(0).max(1) as f64;
    let scale_a = Scale::new(top_a, PANEL_A, 0.0, n_max);
    let y_a = |v: f64| scale_a.y(v);
    panel(out, scale_a, "(a) instances available", "instances")?;
    axis.ticks(out, top_a, top_a + PANEL_A, false)?;
    let available: Vec<f64> = super::instances(series).into_iter().map(f64::from).collect();
    let path = step_path(&axis, &available, y_a);
    writeln!(
        out,
        r##"<path d="{path}V{:.1}H{:.1}Z" fill="#dbe7f3" stroke="none"/>"##,
        y_a(0.0),
        axis.x(0.0)
    )?;
    writeln!(out, r##"<path d="{path}" fill="none" stroke="#4e79a7" stroke-width="1.8"/>"##)?;
    frame(out, top_a, PANEL_A)?;

    // (b) instances used (D x P) per decision maker.
    let scale_b = Scale::new(top_b, PANEL_B, 0.0, n_max);
    let y_b = |v: f64| scale_b.y(v);
    panel(out, scale_b, "(b) instances used by the chosen layout (D x P)", "instances")?;
    axis.ticks(out, top_b, top_b + PANEL_B, false)?;
    writeln!(
        out,
        r##"<path d="{}" fill="none" stroke="#bbbbbb" stroke-width="4" stroke-opacity="0.6"/>"##,
        step_path(&axis, &available, y_b)
    )?;
    let drawn: Vec<usize> = (0..bench.rows.len()).filter(|&i| bench.rows[i].name != "ideal").collect();
    let count = drawn.len() as f64;
    for (j, &i) in drawn.iter().enumerate() {
        let row = &bench.rows[i];
        let used: Vec<f64> =
            row.result.intervals.iter().map(|r| r.config.map_or(0.0, |c| c.instances() as f64)).collect();
        // Spread overlapping lines apart by a pixel or so.
        let offset = (j as f64 - (count - 1.0) / 2.0) * 1.6;
        let s = style(i, false);
        writeln!(
            out,
            r#"<path d="{}" fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}" stroke-opacity="0.9"/>"#,
            step_path(&axis, &used, |v| y_b(v) + offset),
            s.colour,
            s.width,
            s.dash
        )?;
    }
    frame(out, top_b, PANEL_B)?;

    // (c) cumulative expected samples.
    let cumulative: Vec<Vec<f64>> = bench.rows.iter().map(|r| r.result.cumulative_samples()).collect();
    // Net samples can dip below zero when a restart rolls work back.
    let s_max = cumulative.iter().flatten().copied().fold(0.0, f64::max).max(1.0);
    let s_min = cumulative.iter().flatten().copied().fold(0.0, f64::min);
    let scale_c = Scale::new(top_c, PANEL_C, s_min, s_max);
    let y_c = |v: f64| scale_c.y(v);
    panel(out, scale_c, "(c) cumulative expected samples (net of rolled-back work)", "samples")?;
    axis.ticks(out, top_c, top_c + PANEL_C, true)?;
    for (i, (row, cum)) in bench.rows.iter().zip(&cumulative).enumerate() {
        let s = style(i, row.name == "ideal");
        let mut points = format!("{:.1},{:.1}", axis.x(0.0), y_c(0.0));
        for (k, v) in cum.iter().enumerate() {
            let _ = write!(points, " {:.1},{:.1}", axis.x(k as f64 + 1.0), y_c(*v));
        }
        writeln!(
            out,
            r#"<polyline points="{points}" fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}"/>"#,
            s.colour, s.width, s.dash
        )?;
    }
    frame(out, top_c, PANEL_C)?;

    // Legend.
    writeln!(out, r#"<text x="{LEGEND_X:.1}" y="{:.1}" class="title">legend</text>"#, top_b - 10.0)?;
    writeln!(
        out,
        r##"<line x1="{LEGEND_X:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bbbbbb" stroke-width="4" stroke-opacity="0.6"/>"##,
        top_b + 10.0,
        LEGEND_X + 28.0,
        top_b + 10.0
    )?;
    writeln!(out, r#"<text x="{:.1}" y="{:.1}">available (b)</text>"#, LEGEND_X + 36.0, top_b + 14.0)?;
    for (i, row) in bench.rows.iter().enumerate() {
        let y = top_b + 34.0 + 22.0 * i as f64;
        let s = style(i, row.name == "ideal");
        writeln!(
            out,
            r#"<line x1="{LEGEND_X:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="3" stroke-dasharray="{}"/>"#,
            LEGEND_X + 28.0,
            s.colour,
            s.dash
        )?;
        let tag = if row.kind == RowKind::Policy { " (policy)" } else { "" };
        writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{}{tag}</text>"#,
            LEGEND_X + 36.0,
            y + 4.0,
            escape(&row.name)
        )?;
    }
    writeln!(out, "</svg>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(32.0, 5.0), 10.0);
        assert_eq!(nice_step(60.0, 10.0), 10.0);
        assert_eq!(nice_step(40.0, 10.0), 5.0);
        assert_eq!(nice_step(11.4, 10.0), 2.0);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(45_000.0), "45k");
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(2.5), "2.5");
    }
}
