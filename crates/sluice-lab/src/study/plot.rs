//! PNG charts drawn with plotters, labelled axes with units: line charts (one line per series,
//! the spread of each point's runs as a vertical bar) and bar charts (grouped or stacked).

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

/// One line of a chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) in drawing order.
    pub points: Vec<(f64, f64)>,
    /// (x, low, high): the spread of the runs at x.
    pub spread: Vec<(f64, f64, f64)>,
    /// Markers only, no line (observations beside a fitted line).
    pub markers_only: bool,
}

/// A chart.
#[derive(Clone, Debug, Default)]
pub struct Chart {
    /// Caption.
    pub title: String,
    /// X axis label, with unit.
    pub x_label: String,
    /// Y axis label, with unit.
    pub y_label: String,
    /// Powers of two on the x axis.
    pub log2_x: bool,
    /// Powers of ten on the y axis (all values must be positive).
    pub log10_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

/// Line colours: ten that stay apart on white and for common colour blindness (the
/// "tableau 10" set).
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// Fonts searched for the chart text (Debian: fonts-dejavu-core).
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a TrueType font as "sans-serif" once per process (plotters keeps a `'static`
/// reference to the bytes); every chart the lab draws calls it first.
pub(crate) fn font() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = FONTS
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .ok_or_else(|| {
                    format!(
                        "plots need a TrueType font, none of {} exists \
                         (apt-get install fonts-dejavu-core)",
                        FONTS.join(", ")
                    )
                })?;
            // The font lives as long as the process: plotters keeps a 'static reference.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "the font file is not a usable TrueType font".to_string())
        })
        .clone()
}

/// Draws `chart` into a 1000 x 640 PNG at `path`.
pub fn draw(chart: &Chart, path: &Path) -> Result<(), String> {
    font()?;
    let tx = |x: f64| if chart.log2_x { x.max(1e-9).log2() } else { x };
    let ty = |y: f64| {
        if chart.log10_y {
            y.max(1e-12).log10()
        } else {
            y
        }
    };
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let ys = chart.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| ty(p.1))
            .chain(s.spread.iter().flat_map(|p| [ty(p.1), ty(p.2)]))
    });
    let (x0, x1) = bounds(xs).ok_or("a chart needs at least one point")?;
    let (ylo, y1) = bounds(ys).ok_or("a chart needs at least one point")?;
    let pad = ((x1 - x0) * 0.04).max(0.1);
    let (x0, x1) = (x0 - pad, x1 + pad);
    // Throughput starts at zero; residuals go below it. A log axis spans whole decades.
    let (y0, y1) = if chart.log10_y {
        (ylo.floor(), y1.ceil().max(ylo.floor() + 1.0))
    } else {
        (
            if ylo < 0.0 { ylo * 1.08 } else { 0.0 },
            if y1 > 0.0 { y1 * 1.08 } else { 1.0 },
        )
    };
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let log2 = chart.log2_x;
    let x_fmt = move |v: &f64| {
        if log2 {
            // Label the powers of two only (0.5, 1, 2, ...): 2^k is exact in an f64.
            if (v - v.round()).abs() < 1e-6 {
                format!("{}", 2f64.powi(v.round() as i32))
            } else {
                String::new()
            }
        } else {
            format!("{v}")
        }
    };
    let log10 = chart.log10_y;
    let y_fmt = move |v: &f64| {
        if !log10 {
            format!("{v}")
        } else if (v - v.round()).abs() < 1e-6 {
            // Label the powers of ten only (0.01, 0.1, 1, 10, ...).
            let p = 10f64.powi(v.round() as i32);
            if p >= 1.0 {
                format!("{p}")
            } else {
                format!("{p:.prec$}", prec = (-v.round()) as usize)
            }
        } else {
            String::new()
        }
    };
    let mut mesh = c.configure_mesh();
    mesh.x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 14))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt);
    if log10 {
        mesh.y_labels(((y1 - y0).round() as usize + 1).max(2));
    }
    if log2 {
        // One tick per power of two.
        mesh.x_labels(((x1 - x0).ceil() as usize + 1).max(2));
    }
    mesh.draw().map_err(|e| err(&e))?;
    for (i, s) in chart.series.iter().enumerate() {
        let (r, g, b) = PALETTE[i % PALETTE.len()];
        let color = RGBColor(r, g, b).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), ty(y))).collect();
        let legend_color = color;
        let anno = if s.markers_only {
            c.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| err(&e))?
        } else {
            c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
        };
        anno.label(s.name.clone()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], legend_color.stroke_width(3))
        });
        if !s.markers_only {
            c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        c.draw_series(s.spread.iter().map(|&(x, lo, hi)| {
            PathElement::new(
                vec![(tx(x), ty(lo)), (tx(x), ty(hi))],
                color.stroke_width(1),
            )
        }))
        .map_err(|e| err(&e))?;
    }
    if chart.series.iter().any(|s| !s.name.is_empty()) {
        c.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One kind of bar: its value in each group.
#[derive(Clone, Debug, Default)]
pub struct Bars {
    /// Legend text.
    pub name: String,
    /// One value per group (in the chart's group order).
    pub values: Vec<f64>,
}

/// A bar chart: for each group, one bar per series side by side, or one bar of the series
/// stacked.
#[derive(Clone, Debug, Default)]
pub struct BarChart {
    /// Caption.
    pub title: String,
    /// What the groups are (the x axis).
    pub x_label: String,
    /// Y axis label, with unit.
    pub y_label: String,
    /// Group names, left to right.
    pub groups: Vec<String>,
    /// The series.
    pub series: Vec<Bars>,
    /// Stack the series in one bar per group instead of side by side.
    pub stacked: bool,
}

/// Draws `chart` into a 1000 x 640 PNG at `path`.
pub fn draw_bars(chart: &BarChart, path: &Path) -> Result<(), String> {
    font()?;
    let n = chart.groups.len();
    if n == 0 || chart.series.is_empty() {
        return Err("a bar chart needs a group and a series".into());
    }
    let value = |s: &Bars, g: usize| {
        s.values
            .get(g)
            .copied()
            .filter(|v| v.is_finite())
            .unwrap_or(0.0)
    };
    let top = (0..n)
        .map(|g| {
            if chart.stacked {
                chart
                    .series
                    .iter()
                    .map(|s| value(s, g).max(0.0))
                    .sum::<f64>()
            } else {
                chart.series.iter().map(|s| value(s, g)).fold(0.0, f64::max)
            }
        })
        .fold(0.0, f64::max);
    let y1 = if top > 0.0 { top * 1.15 } else { 1.0 };
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..n as f64, 0.0..y1)
        .map_err(|e| err(&e))?;
    let groups = chart.groups.clone();
    let x_fmt = move |v: &f64| {
        // Group g spans [g, g + 1): its name under its middle.
        let g = (v - 0.5).round();
        if (v - 0.5 - g).abs() < 1e-6 && g >= 0.0 {
            groups.get(g as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_fmt = |v: &f64| match v.abs() {
        a if a >= 100.0 || a == 0.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.3}"),
    };
    c.configure_mesh()
        .disable_x_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 14))
        .x_labels(2 * n + 1)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(|e| err(&e))?;
    let k = chart.series.len();
    for (i, s) in chart.series.iter().enumerate() {
        let (r, g, b) = PALETTE[i % PALETTE.len()];
        let color = RGBColor(r, g, b).to_rgba();
        let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
            .map(|grp| {
                let v = value(s, grp).max(0.0);
                let (x0, x1, base) = if chart.stacked {
                    let below: f64 = chart.series[..i]
                        .iter()
                        .map(|o| value(o, grp).max(0.0))
                        .sum();
                    (grp as f64 + 0.2, grp as f64 + 0.8, below)
                } else {
                    let w = 0.8 / k as f64;
                    let x0 = grp as f64 + 0.1 + w * i as f64;
                    (x0, x0 + w * 0.9, 0.0)
                };
                Rectangle::new([(x0, base), (x1, base + v)], color.filled())
            })
            .collect();
        c.draw_series(rects)
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn bounds(v: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    v.filter(|x| x.is_finite()).fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((a, b)) => Some((a.min(x), b.max(x))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png() {
        // The font is a documented prerequisite that scripts/install-deps installs.
        font().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.png");
        let chart = Chart {
            title: "t".into(),
            x_label: "MRDSL (KiB)".into(),
            y_label: "MiB/s".into(),
            log2_x: true,
            log10_y: false,
            series: vec![Series {
                name: "a".into(),
                points: vec![(0.5, 10.0), (8.0, 40.0), (128.0, 45.0)],
                spread: vec![(8.0, 38.0, 42.0)],
                markers_only: false,
            }],
        };
        draw(&chart, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(draw(&Chart::default(), &path).is_err());
        let log = Chart {
            log10_y: true,
            ..chart
        };
        draw(&log, &dir.path().join("log.png")).unwrap();
    }

    #[test]
    fn draws_bars_grouped_and_stacked() {
        font().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut chart = BarChart {
            title: "t".into(),
            x_label: "PDU".into(),
            y_label: "cycles".into(),
            groups: vec!["512 B".into(), "8 KiB".into()],
            series: vec![
                Bars {
                    name: "crc".into(),
                    values: vec![1.0, 8.0],
                },
                Bars {
                    name: "copy".into(),
                    values: vec![2.0, 3.0],
                },
            ],
            stacked: false,
        };
        for stacked in [false, true] {
            chart.stacked = stacked;
            let path = dir.path().join(format!("b{stacked}.png"));
            draw_bars(&chart, &path).unwrap();
            assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
        }
        assert!(draw_bars(&BarChart::default(), &dir.path().join("x.png")).is_err());
    }
}
