//! PNG line charts drawn with plotters: labelled axes with units, one line per series, the
//! spread of each point's runs as a vertical bar.

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

/// Registers a TrueType font as "sans-serif" once per process.
fn font() -> Result<(), String> {
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
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let ys = chart.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.spread.iter().flat_map(|p| [p.1, p.2]))
    });
    let (x0, x1) = bounds(xs).ok_or("a chart needs at least one point")?;
    let (ylo, y1) = bounds(ys).ok_or("a chart needs at least one point")?;
    let pad = ((x1 - x0) * 0.04).max(0.1);
    let (x0, x1) = (x0 - pad, x1 + pad);
    // Throughput starts at zero; residuals go below it.
    let y0 = if ylo < 0.0 { ylo * 1.08 } else { 0.0 };
    let y1 = if y1 > 0.0 { y1 * 1.08 } else { 1.0 };
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
    let mut mesh = c.configure_mesh();
    mesh.x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 14))
        .x_label_formatter(&x_fmt);
    if log2 {
        // One tick per power of two.
        mesh.x_labels(((x1 - x0).ceil() as usize + 1).max(2));
    }
    mesh.draw().map_err(|e| err(&e))?;
    for (i, s) in chart.series.iter().enumerate() {
        let (r, g, b) = PALETTE[i % PALETTE.len()];
        let color = RGBColor(r, g, b).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
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
            PathElement::new(vec![(tx(x), lo), (tx(x), hi)], color.stroke_width(1))
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
    }
}
