//! A small SVG builder shared by every figure the host draws (bench plots,
//! trace plots, a run's report): the document, escaping, "nice" axis ticks,
//! plot frames, axes, lines, polylines, paths, markers and legend entries.
//! No plotting crate: text into a string. Each figure keeps only its own
//! layout and styles; coordinates are written with one decimal everywhere.

use std::fmt::Write;

/// Distinct colours (Tableau 10) for the series of a figure, in order.
pub const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#bab0ac",
];

/// An SVG document being written.
pub struct Svg {
    out: String,
}

/// Which side of a plot area a vertical axis is drawn on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Ticks and labels left of the area.
    Left,
    /// Ticks and labels right of the area.
    Right,
}

/// The rectangle data is drawn in, in pixels.
#[derive(Debug, Clone, Copy)]
pub struct Area {
    /// Left edge.
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

impl Area {
    /// Right edge.
    pub fn right(&self) -> f64 {
        self.left + self.width
    }

    /// Bottom edge.
    pub fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// The swatch of a legend entry: a line `width` long, its text `gap` after it.
#[derive(Debug, Clone, Copy)]
pub struct Swatch {
    /// Length of the line, pixels.
    pub width: f64,
    /// Space between the line's end and the text, pixels.
    pub gap: f64,
}

// Writing into a String cannot fail, so the builder's methods drop the
// `fmt::Result`s of `write!`.
impl Svg {
    /// A document `width` x `height` pixels on a white background, with an
    /// optional style sheet (`css`, the body of a `<style>` element).
    pub fn new(width: f64, height: f64, css: Option<&str>) -> Svg {
        let mut svg = Svg { out: String::new() };
        let _ = writeln!(
            svg.out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
        );
        if let Some(css) = css {
            let _ = writeln!(svg.out, "<style>{css}</style>");
        }
        let _ = writeln!(svg.out, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
        svg
    }

    /// Closes the document and returns its text.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }

    /// An element written as given (for the few a figure shapes by hand).
    pub fn raw(&mut self, element: std::fmt::Arguments<'_>) {
        let _ = self.out.write_fmt(element);
        self.out.push('\n');
    }

    /// A straight line with `style` attributes (`stroke="..." ...`).
    pub fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
        let _ = writeln!(self.out, r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {style}/>"#);
    }

    /// Text at (`x`, `y`) with `attrs` (may be empty); `text` is escaped.
    pub fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let space = if attrs.is_empty() { "" } else { " " };
        let _ = writeln!(self.out, r#"<text x="{x:.1}" y="{y:.1}"{space}{attrs}>{}</text>"#, escape(text));
    }

    /// Text rotated to read bottom-up, centred on (`x`, `y`): a vertical axis title.
    pub fn vertical_text(&mut self, x: f64, y: f64, text: &str) {
        let _ = writeln!(
            self.out,
            r#"<text transform="translate({x:.1},{y:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            escape(text)
        );
    }

    /// A rectangle with `style` attributes.
    pub fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, style: &str) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{height:.1}" {style}/>"#
        );
    }

    /// The outline of a plot area.
    pub fn frame(&mut self, area: Area) {
        self.rect(area.left, area.top, area.width, area.height, r##"fill="none" stroke="#333""##);
    }

    /// A circle marker with `style` attributes.
    pub fn circle(&mut self, (cx, cy): (f64, f64), r: f64, style: &str) {
        let _ = writeln!(self.out, r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{r}" {style}/>"#);
    }

    /// A path (`d` as built by [`step_path`] or by hand) with `style` attributes.
    pub fn path(&mut self, d: &str, style: &str) {
        let _ = writeln!(self.out, r#"<path d="{d}" {style}/>"#);
    }

    /// A polyline through `points` with `style` attributes.
    pub fn polyline(&mut self, points: &[(f64, f64)], style: &str) {
        let mut text = String::new();
        for (i, (x, y)) in points.iter().enumerate() {
            let _ = write!(text, "{}{x:.1},{y:.1}", if i == 0 { "" } else { " " });
        }
        let _ = writeln!(self.out, r#"<polyline points="{text}" {style}/>"#);
    }

    /// One tick of a horizontal axis at pixel `x` below `area`: a grid line
    /// (if `grid`), the tick and its `label`, `label_gap` pixels below the area.
    pub fn x_tick(&mut self, area: Area, x: f64, label: &str, label_gap: f64, grid: bool) {
        let bottom = area.bottom();
        if grid {
            self.line((x, area.top), (x, bottom), r##"stroke="#e4e4e4""##);
        }
        self.line((x, bottom), (x, bottom + 4.0), r##"stroke="#333""##);
        self.text(x, bottom + label_gap, r#"text-anchor="middle""#, label);
    }

    /// One tick of a vertical axis at pixel `y` on `side` of `area`: a grid
    /// line across the area (if `grid`), the tick and its `label`.
    pub fn y_tick(&mut self, area: Area, y: f64, label: &str, side: Side, grid: bool) {
        if grid {
            self.line((area.left, y), (area.right(), y), r##"stroke="#e4e4e4""##);
        }
        match side {
            Side::Left => {
                self.line((area.left - 4.0, y), (area.left, y), r##"stroke="#333""##);
                self.text(area.left - 7.0, y + 4.0, r#"text-anchor="end""#, label);
            }
            Side::Right => {
                self.line((area.right(), y), (area.right() + 4.0, y), r##"stroke="#333""##);
                self.text(area.right() + 7.0, y + 4.0, r#"text-anchor="start""#, label);
            }
        }
    }

    /// The title of a horizontal axis, centred `gap` pixels below `area`.
    pub fn x_title(&mut self, area: Area, gap: f64, title: &str) {
        self.text(area.left + area.width / 2.0, area.bottom() + gap, r#"text-anchor="middle""#, title);
    }

    /// One legend entry: a line in `style` from (`x`, `y`), then `text`.
    pub fn legend_entry(&mut self, (x, y): (f64, f64), swatch: Swatch, style: &str, text: &str) {
        self.line((x, y), (x + swatch.width, y), style);
        self.text(x + swatch.width + swatch.gap, y + 4.0, "", text);
    }
}

/// Text made safe inside SVG markup.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 x 10^k) giving about `target` ticks over `range`.
pub fn nice_step(range: f64, target: f64) -> f64 {
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

/// Tick values over `[min, max]`: the multiples of a nice step giving about
/// `target` ticks.
pub fn ticks(min: f64, max: f64, target: f64) -> Vec<f64> {
    let step = nice_step(max - min, target);
    let mut values = Vec::new();
    let mut v = (min / step).ceil() * step;
    while v <= max + step * 1e-9 {
        values.push(v);
        v += step;
    }
    values
}

/// Path of a step function: `values[k]` over `[x(k), x(k + 1)]`, mapped by `y`.
pub fn step_path(values: &[f64], x: impl Fn(f64) -> f64, y: impl Fn(f64) -> f64) -> String {
    let mut d = String::new();
    for (k, v) in values.iter().enumerate() {
        let (x0, x1, yv) = (x(k as f64), x(k as f64 + 1.0), y(*v));
        if k == 0 {
            let _ = write!(d, "M{x0:.1},{yv:.1}");
        } else {
            let _ = write!(d, "V{yv:.1}");
        }
        let _ = write!(d, "H{x1:.1}");
    }
    d
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
    fn ticks_cover_the_range_on_nice_multiples() {
        assert_eq!(ticks(0.0, 32.0, 5.0), [0.0, 10.0, 20.0, 30.0]);
        assert_eq!(ticks(-3.0, 4.0, 5.0), [-2.0, 0.0, 2.0, 4.0]);
    }

    #[test]
    fn elements_are_escaped_and_the_document_closes() {
        let mut svg = Svg::new(100.0, 50.0, None);
        svg.text(1.0, 2.0, "", "a<b & \"c\"");
        svg.polyline(&[(0.0, 1.0), (2.26, 3.0)], r#"fill="none""#);
        let text = svg.finish();
        assert!(text.contains(r#"<text x="1.0" y="2.0">a&lt;b &amp; &quot;c&quot;</text>"#), "{text}");
        assert!(text.contains(r#"<polyline points="0.0,1.0 2.3,3.0" fill="none"/>"#), "{text}");
        assert!(text.starts_with("<svg") && text.ends_with("</svg>\n"));
    }
}
