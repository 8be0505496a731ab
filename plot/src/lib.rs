//! Line plots as self-contained SVG: one colour per series name, a line style per kind of data
//! (measured solid, simulated dashed), every legend entry once, labelled log axes.
//!
//! Hand-written rather than drawn with a plotting library on purpose: the output uses only
//! `line`, `polyline`, `circle`, `rect` and `text` with explicit attributes (no CSS, no fonts
//! beyond the generic `sans-serif`, no `dominant-baseline`), so a browser and `rsvg-convert`
//! render it the same, and the file diffs readably when a committed plot is regenerated.

use std::fmt::Write as _;

/// How a series is drawn; the legend explains each style a plot uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Line {
    /// Measured data: a solid line with a dot at each point.
    #[default]
    Solid,
    /// Simulated or predicted data: a dashed line in the series' colour, no dots.
    Dashed,
    /// A second quantity of the same series (e.g. p50 beside p99): dotted, hollow dots.
    Dotted,
}

impl Line {
    fn dash(self) -> &'static str {
        match self {
            Line::Solid => "",
            Line::Dashed => r#" stroke-dasharray="7 4""#,
            Line::Dotted => r#" stroke-dasharray="2 3""#,
        }
    }
}

/// A line series for [`line_plot`]. Series with the same `label` share one colour and one
/// legend entry (e.g. a mode's measured line and its simulated line).
pub struct Series {
    pub label: String,
    pub style: Line,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A solid (measured) series.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { label: label.into(), style: Line::Solid, points }
    }

    /// The same series drawn in `style`.
    pub fn styled(mut self, style: Line) -> Series {
        self.style = style;
        self
    }
}

/// Colours that stay apart for the common kinds of colour blindness (Okabe–Ito, then Tableau).
const COLORS: [&str; 12] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8c564b", "#7f7f7f", "#bcbd22",
    "#17becf", "#9467bd",
];

/// The colour of the `i`th distinct label; beyond the palette, colours repeat with a wider line.
fn color(i: usize) -> &'static str {
    COLORS[i % COLORS.len()]
}

/// A plot with one colour per distinct label and a legend naming each label once; when the
/// series use more than one [`Line`] style, `styles` names what each style means (e.g.
/// `(Line::Dashed, "simulated")`) and the legend explains them once, in grey.
/// The y axis is logarithmic when the values span more than 20×, the x axis when its
/// (positive) values span more than 100×; the axis label then says "log scale".
pub fn line_plot_styled(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    styles: &[(Line, &str)],
) -> String {
    line_plot_scaled(title, x_label, y_label, series, styles, Scales::default())
}

/// Which axes are logarithmic: `None` leaves it to [`line_plot_styled`]'s rule (by the
/// values' span).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scales {
    pub log_x: Option<bool>,
    pub log_y: Option<bool>,
}

/// [`line_plot_styled`] with the axes' scales chosen by the caller: e.g. a log x axis for a
/// sweep over powers of two (a concurrency limit from 1 to 64, whose small values a linear
/// axis would crowd into its first tenth) and a linear y axis for a percentage that runs
/// from 5 to 100. A log axis needs positive values: with any at or below zero it is linear.
pub fn line_plot_scaled(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    styles: &[(Line, &str)],
    scales: Scales,
) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for s in series {
        if !labels.contains(&s.label.as_str()) {
            labels.push(&s.label);
        }
    }
    let mut used_styles: Vec<Line> = Vec::new();
    for s in series {
        if !used_styles.contains(&s.style) {
            used_styles.push(s.style);
        }
    }
    let style_entries: Vec<(Line, &str)> = if used_styles.len() > 1 {
        used_styles.iter().map(|&st| (st, styles.iter().find(|(l, _)| *l == st).map_or("", |(_, n)| *n))).collect()
    } else {
        Vec::new()
    };
    // The legend's width follows its longest entry (about 7 px per character at 12 px).
    let longest = labels.iter().map(|l| l.chars().count()).chain(style_entries.iter().map(|(_, n)| n.chars().count()));
    let legend_w = 50.0 + 7.0 * longest.max().unwrap_or(4) as f64;
    let entries = labels.len() + style_entries.len() + usize::from(!style_entries.is_empty());
    let (plot_w, ml, mt, mb): (f64, f64, f64, f64) = (560.0, 80.0, 40.0, 50.0);
    let w = ml + plot_w + legend_w + 10.0;
    let h: f64 = (mt + 350.0 + mb).max(mt + 20.0 * entries as f64 + 20.0);

    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in series.iter().flat_map(|s| s.points.iter()).filter(finite) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y > 0.0 {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if y0 > y1 {
        (y0, y1) = (1.0, 10.0);
    }
    if x1 == x0 {
        x1 = x0 + 1.0;
    }
    let log_y = y0 > 0.0 && scales.log_y.unwrap_or(y1 / y0 > 20.0);
    let log_x = x0 > 0.0 && scales.log_x.unwrap_or(x1 / x0 > 100.0);
    let y_axis = Axis::new(log_y, if log_y { y0 } else { 0.0 }, y1 * if log_y { 1.0 } else { 1.05 });
    let x_axis = Axis::new(log_x, x0, x1);
    let px = |x: f64| ml + x_axis.frac(x) * plot_w;
    let py = |y: f64| mt + (1.0 - y_axis.frac(y)) * (h - mt - mb);
    let plotted = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite() && (!log_y || p.1 > 0.0) && (!log_x || p.0 > 0.0);

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        ml + plot_w / 2.0,
        xml(title)
    );
    let bottom = h - mb;
    for t in x_axis.ticks() {
        let x = px(t.value);
        if t.major {
            let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{mt}" x2="{x:.1}" y2="{bottom}" stroke="#eeeeee"/>"##);
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                bottom + 16.0,
                trim_num(t.value)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{}" stroke="black"/>"#,
            bottom + if t.major { 5.0 } else { 3.0 }
        );
    }
    for t in y_axis.ticks() {
        let y = py(t.value);
        if t.major {
            let _ = writeln!(s, r##"<line x1="{ml}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#dddddd"/>"##, ml + plot_w);
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                ml - 7.0,
                y + 4.0,
                trim_num(t.value)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{y:.1}" x2="{ml}" y2="{y:.1}" stroke="black"/>"#,
            ml - if t.major { 5.0 } else { 3.0 }
        );
    }
    let _ = writeln!(s, r#"<line x1="{ml}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/>"#, ml + plot_w);
    let _ = writeln!(s, r#"<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{bottom}" stroke="black"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}{}</text>"#,
        ml + plot_w / 2.0,
        h - 12.0,
        xml(x_label),
        if log_x { " (log scale)" } else { "" }
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}{2}</text>"#,
        (mt + bottom) / 2.0,
        xml(y_label),
        if log_y { " (log scale)" } else { "" }
    );

    for se in series {
        let i = labels.iter().position(|l| *l == se.label).expect("collected above");
        let c = color(i);
        let width = if i >= COLORS.len() { 3.5 } else { 2.0 };
        let pts: Vec<(f64, f64)> = se.points.iter().filter(|p| plotted(p)).map(|&(x, y)| (px(x), py(y))).collect();
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="{width}"{} points="{}"/>"#,
            se.style.dash(),
            path.join(" ")
        );
        for (x, y) in &pts {
            match se.style {
                Line::Solid => {
                    let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{c}"/>"#);
                }
                Line::Dotted => {
                    let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="white" stroke="{c}"/>"#);
                }
                Line::Dashed => {}
            }
        }
    }

    // The legend: each label once (its colour), then what each line style means (in grey).
    let lx = ml + plot_w + 14.0;
    let mut ly = mt + 10.0;
    s.push_str("<g class=\"legend\">\n");
    for (i, label) in labels.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            color(i),
            lx + 30.0,
            ly + 4.0,
            xml(label)
        );
        ly += 20.0;
    }
    if !style_entries.is_empty() {
        ly += 10.0;
        for (st, name) in &style_entries {
            let _ = writeln!(
                s,
                r##"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="#555555" stroke-width="2"{}/><text x="{}" y="{}">{}</text>"##,
                lx + 24.0,
                st.dash(),
                lx + 30.0,
                ly + 4.0,
                xml(name)
            );
            ly += 20.0;
        }
    }
    s.push_str("</g>\n</svg>\n");
    s
}

/// The texts of a plot's legend (`<g class="legend">`), in order: for checks that each
/// entry appears once. `None` if the SVG has no legend group.
pub fn legend_entries(svg: &str) -> Option<Vec<String>> {
    let start = svg.find("<g class=\"legend\">")?;
    let end = start + svg[start..].find("</g>")?;
    let mut out = Vec::new();
    let mut rest = &svg[start..end];
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let open = rest.find('>')? + 1;
        let close = rest.find("</text>")?;
        out.push(rest[open..close].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"));
        rest = &rest[close..];
    }
    Some(out)
}

/// [`line_plot_styled`] for plots whose series are all of one kind.
pub fn line_plot(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    line_plot_styled(title, x_label, y_label, series, &[])
}

/// One axis: linear over [lo, hi], or log10 over whole decades covering it.
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

struct Tick {
    value: f64,
    major: bool,
}

impl Axis {
    fn new(log: bool, lo: f64, hi: f64) -> Axis {
        if log {
            Axis { log, lo: lo.log10().floor(), hi: hi.log10().ceil().max(lo.log10().floor() + 1.0) }
        } else {
            let hi = nice_ticks(lo, hi).last().copied().filter(|&t| t >= hi).unwrap_or(hi);
            Axis { log, lo, hi: if hi > lo { hi } else { lo + 1.0 } }
        }
    }

    /// Where `v` sits along the axis, 0 at `lo` and 1 at `hi`.
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.log10() - self.lo) / (self.hi - self.lo)
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// Labelled ticks (every decade on a log axis, round numbers on a linear one) and, on a
    /// log axis, unlabelled minor ticks at 2..9 × each decade.
    fn ticks(&self) -> Vec<Tick> {
        if !self.log {
            return nice_ticks(self.lo, self.hi).into_iter().map(|value| Tick { value, major: true }).collect();
        }
        let mut out = Vec::new();
        for e in self.lo as i32..=self.hi as i32 {
            let base = 10f64.powi(e);
            out.push(Tick { value: base, major: true });
            if e < self.hi as i32 {
                out.extend((2..10).map(|m| Tick { value: base * m as f64, major: false }));
            }
        }
        out
    }
}

/// Round-numbered ticks (1, 2, 2.5 or 5 × 10^k apart) covering [lo, hi], about five of them.
fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = (hi - lo) / 5.0;
    if !(raw.is_finite() && raw > 0.0) {
        return vec![lo];
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..).map(|i| first + i as f64 * step).take_while(|&t| t <= hi + step * 1e-9).collect()
}

fn trim_num(x: f64) -> String {
    // Log axes go down to 1e-4 and below (latency CCDFs): "0" would hide them.
    if x != 0.0 && x.abs() < 0.001 {
        return format!("{x:e}");
    }
    let s = if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legend(svg: &str) -> Vec<String> {
        legend_entries(svg).expect("a legend")
    }

    #[test]
    fn measured_and_simulated_of_one_mode_share_a_colour_and_one_legend_entry() {
        let mut series = Vec::new();
        // Points interleaved across loads, as the demo's runs come: modes repeat.
        for _ in 0..2 {
            for m in ["linux", "orf"] {
                series.push(Series::new(m, vec![(0.5, 2.0), (0.7, 5.0)]));
                series.push(Series::new(m, vec![(0.5, 1.8), (0.7, 4.0)]).styled(Line::Dashed));
            }
        }
        let svg = line_plot_styled("t", "x", "y", &series, &[(Line::Solid, "measured"), (Line::Dashed, "simulated")]);
        assert_eq!(legend(&svg), ["linux", "orf", "measured", "simulated"]);
        let linux_color = color(0);
        let lines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert!(lines[0].contains(linux_color) && !lines[0].contains("dasharray"));
        assert!(lines[1].contains(linux_color) && lines[1].contains("dasharray"));
        assert!(!lines[2].contains(linux_color));
    }

    #[test]
    fn a_wide_range_gets_a_labelled_log_axis_with_decade_ticks() {
        let svg = line_plot("t", "load", "p99 (ms)", &[Series::new("a", vec![(1.0, 0.5), (2.0, 400.0)])]);
        assert!(svg.contains("p99 (ms) (log scale)"), "{svg}");
        for decade in [">0.1<", ">1<", ">10<", ">100<", ">1000<"] {
            assert!(svg.contains(decade), "tick {decade} missing");
        }
        let narrow = line_plot("t", "load", "p99 (ms)", &[Series::new("a", vec![(1.0, 2.0), (2.0, 3.0)])]);
        assert!(!narrow.contains("log scale"));
    }

    #[test]
    fn the_caller_can_choose_each_axis_scale() {
        let sweep = [Series::new("a", vec![(1.0, 4.0), (2.0, 40.0), (64.0, 100.0)])];
        let auto = line_plot("t", "c", "goodput %", &sweep);
        assert!(auto.contains("goodput % (log scale)") && !auto.contains("c (log scale)"), "{auto}");
        let chosen =
            line_plot_scaled("t", "c", "goodput %", &sweep, &[], Scales { log_x: Some(true), log_y: Some(false) });
        assert!(chosen.contains("c (log scale)") && !chosen.contains("goodput % (log scale)"), "{chosen}");
        let with_zero = [Series::new("a", vec![(0.0, 5.0), (64.0, 100.0)])];
        let linear = line_plot_scaled("t", "c", "y", &with_zero, &[], Scales { log_x: Some(true), log_y: None });
        assert!(!linear.contains("c (log scale)"), "a log axis needs positive values");
    }
}
