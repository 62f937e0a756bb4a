//! Log-log charts of aliasing probabilities (the study plots them against packet length), with
//! 95 % intervals as vertical bars. Probabilities span tens of decades, wider than the lab's
//! shared line chart allows, so this module draws its own.

use std::path::Path;

use plotters::coord::combinators::IntoLogRange;

use plotters::prelude::*;

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A solid line.
    Line,
    /// A dashed line (asymptotes, closed forms).
    Dashed,
    /// Markers only (simulations, the study's quoted points).
    Markers,
}

/// One series of a chart.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// Points `(x, y)`; points with `y <= 0` are left out (a log axis has no zero).
    pub points: Vec<(f64, f64)>,
    /// `(x, low, high)` interval bars.
    pub bars: Vec<(f64, f64, f64)>,
    /// How to draw it.
    pub style: Style,
}

impl Line {
    /// A series without interval bars.
    #[must_use]
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, style: Style) -> Line {
        Line {
            name: name.into(),
            points,
            bars: Vec::new(),
            style,
        }
    }
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws a 1000 x 680 log-log PNG. The y axis is drawn as decades (the values' base-10
/// logarithms on a linear axis, labelled as powers of ten) so that tens of decades stay
/// legible; the x axis is plotters' logarithmic axis.
pub fn draw(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    lines: &[Line],
) -> Result<(), String> {
    crate::study::plot::font()?;
    let pos = |v: f64| v.is_finite() && v > 0.0;
    let lg = |v: f64| v.log10();
    let xs = lines.iter().flat_map(|l| {
        l.points
            .iter()
            .map(|p| p.0)
            .chain(l.bars.iter().map(|b| b.0))
    });
    let ys = lines.iter().flat_map(|l| {
        l.points
            .iter()
            .map(|p| p.1)
            .chain(l.bars.iter().flat_map(|b| [b.1, b.2]))
    });
    let (x0, x1) = span(xs.filter(|v| pos(*v)).map(lg)).ok_or("a chart needs a positive point")?;
    let (y0, y1) = span(ys.filter(|v| pos(*v)).map(lg)).ok_or("a chart needs a positive point")?;
    let pad = ((x1 - x0) * 0.03).max(0.05);
    let (x0, x1) = (x0 - pad, x1 + pad);
    let (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    let decades = (y1 - y0).round() as usize;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = BitMapBackend::new(path, (1000, 680)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((10f64.powf(x0)..10f64.powf(x1)).log_scale(), y0..y1)
        .map_err(|e| err(&e))?;
    // One y label per decade up to 16 decades, else every second or third.
    let y_step = decades.div_ceil(16).max(1);
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(12)
        .x_label_formatter(&|v| format!("{v}"))
        .y_labels(decades + 1)
        .y_label_formatter(&move |v| decade_label(*v, y_step))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = l
            .points
            .iter()
            .filter(|p| pos(p.0) && pos(p.1))
            .map(|p| (p.0, lg(p.1)))
            .collect();
        let legend = match l.style {
            Style::Line => chart.draw_series(LineSeries::new(pts, color.stroke_width(2))),
            Style::Dashed => {
                chart.draw_series(DashedLineSeries::new(pts, 8, 6, color.stroke_width(2)))
            }
            Style::Markers => chart.draw_series(
                pts.into_iter()
                    .map(|p| Circle::new(p, 5, color.filled()))
                    .collect::<Vec<_>>(),
            ),
        }
        .map_err(|e| err(&e))?;
        legend.label(l.name.clone()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
        });
        let bars: Vec<_> = l
            .bars
            .iter()
            .filter(|b| pos(b.0) && pos(b.2))
            .map(|&(x, lo, hi)| {
                let lo = if pos(lo) { lg(lo) } else { y0 };
                PathElement::new(vec![(x, lo.max(y0)), (x, lg(hi))], color.stroke_width(2))
            })
            .collect();
        chart.draw_series(bars).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The label of a y tick at `log10 = v`: whole decades only (every `step`-th), as `1e-k`.
fn decade_label(v: f64, step: usize) -> String {
    let k = v.round();
    if (v - k).abs() > 1e-6 || (k as i64).rem_euclid(step as i64) != 0 {
        return String::new();
    }
    format!("1e{}", k as i64)
}

fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((a, b)) => Some((a.min(v), b.max(v))),
    })
}
