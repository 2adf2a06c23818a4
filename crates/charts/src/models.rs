//! Plots of performance models — speed against problem size — to SVG or PNG (seed 003's
//! `pmm_view`, digest §2.7).
//!
//! One chart, x = the single size parameter left free after slicing, y = speed in Gop/s. For
//! each model, in its own colour: the model as the agent evaluates it (a line over a dense set of
//! sizes, interpolated by [`Fpm`]), the band between the interpolated min and max speeds, the
//! measured samples (mean, with a min–max bar), the assumed-zero endpoint (a cross at speed 0)
//! and the GBBP construction intervals as segments in a strip under the axis (finalised ones in
//! the model's colour, open ones grey).
//!
//! Text is drawn with the embedded DejaVu Sans font, so PNGs render on machines without any
//! system fonts.

use crate::{Format, PALETTE, format_of, register_fonts};
use anyhow::{Context, Result, anyhow, bail};
use gridwise_fpm::model::{Fpm, Interval};
use gridwise_fpm::stats::SpeedStats;
use gridwise_proto::ModelExport;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::PathBuf;

/// What to draw and where.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    /// The output file; `.svg` or `.png`, chosen by extension.
    pub output: PathBuf,
    /// Size parameters fixed at a value (`n=3000`), so that one parameter remains free.
    pub slice: Vec<(String, i64)>,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
    /// The chart's title; a description of the models and slice when `None`.
    pub title: Option<String>,
}

impl PlotOptions {
    /// Default options (1000×600, no slice, automatic title) writing to `output`.
    pub fn new(output: impl Into<PathBuf>) -> Self {
        Self {
            output: output.into(),
            slice: Vec::new(),
            width: 1000,
            height: 600,
            title: None,
        }
    }
}

/// Operations/s per Gop/s.
const GIGA: f64 = 1e9;

/// Sizes at which each model's line is evaluated (besides its vertices).
const DENSE_SAMPLES: usize = 400;

/// Colour of construction intervals still open.
const OPEN_GREY: RGBColor = RGBColor(170, 170, 170);

/// One measured vertex on the plotted slice, speeds in Gop/s.
#[derive(Clone, Copy, Debug)]
struct Sample {
    x: f64,
    min: f64,
    mean: f64,
    max: f64,
}

/// One model reduced to what the chart draws.
#[derive(Clone, Debug)]
struct Curve {
    label: String,
    /// The one size parameter the slice leaves free: the x axis.
    free: String,
    /// The slice entries that apply to this model.
    fixed: Vec<(String, i64)>,
    /// (x, mean speed) along the model, Gop/s.
    line: Vec<(f64, f64)>,
    /// (x, min speed, max speed) along the model, Gop/s.
    band: Vec<(f64, f64, f64)>,
    /// Measured vertices on the slice.
    samples: Vec<Sample>,
    /// The assumed-zero size, when it is on the slice and not overridden by a measurement.
    zero: Option<f64>,
    /// Construction intervals on the slice: (from, to, finalised).
    intervals: Vec<(f64, f64, bool)>,
}

/// Draws `models` into one chart written to `opts.output`.
pub fn plot_models(models: &[ModelExport], opts: &PlotOptions) -> Result<()> {
    if models.is_empty() {
        bail!("no models to plot");
    }
    let format = format_of(&opts.output, "a plot")?;
    if opts.width < 200 || opts.height < 150 {
        bail!(
            "a plot of {}×{} pixels is too small to draw (at least 200×150)",
            opts.width,
            opts.height
        );
    }
    check_slice(models, &opts.slice)?;
    let curves = models
        .iter()
        .map(|m| curve(m, &opts.slice))
        .collect::<Result<Vec<_>>>()?;
    let title = opts.title.clone().unwrap_or_else(|| default_title(&curves));
    register_fonts()?;
    let size = (opts.width, opts.height);
    let drawn = match format {
        Format::Svg => draw(
            SVGBackend::new(&opts.output, size).into_drawing_area(),
            &curves,
            &title,
        ),
        Format::Png => draw(
            BitMapBackend::new(&opts.output, size).into_drawing_area(),
            &curves,
            &title,
        ),
    };
    drawn.with_context(|| format!("cannot draw the plot to {}", opts.output.display()))
}

/// Rejects slice entries naming no parameter of any model, and names given twice.
fn check_slice(models: &[ModelExport], slice: &[(String, i64)]) -> Result<()> {
    for (i, (name, _)) in slice.iter().enumerate() {
        if slice[..i].iter().any(|(n, _)| n == name) {
            bail!("slice parameter {name} is given more than once");
        }
        if !models.iter().any(|m| m.params.contains(name)) {
            let mut known: Vec<&str> = models
                .iter()
                .flat_map(|m| m.params.iter().map(String::as_str))
                .collect();
            known.sort_unstable();
            known.dedup();
            bail!(
                "unknown slice parameter {name}: the models' size parameters are {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    Ok(())
}

/// The model as the agent holds it.
fn build_fpm(m: &ModelExport) -> Fpm {
    let mut fpm = Fpm::new(m.params.clone());
    for (x, s) in &m.points {
        fpm.insert(x, SpeedStats::from(*s));
    }
    if let Some(z) = &m.assumed_zero {
        fpm.set_assumed_zero(z);
    }
    if let Some(p) = &m.progress {
        let d = m.params.len();
        fpm.set_intervals(
            p.intervals
                .iter()
                .filter(|i| i.lo.len() == d && i.hi.len() == d)
                .cloned()
                .map(Interval::from)
                .collect(),
        );
    }
    fpm
}

fn curve(m: &ModelExport, slice: &[(String, i64)]) -> Result<Curve> {
    let label = format!("{}/{}", m.server, m.service);
    if m.points.is_empty() {
        bail!("model {label} has no points to plot");
    }
    let fpm = build_fpm(m);
    if fpm.is_empty() {
        bail!("model {label} has no valid points to plot (every speed is negative or not finite)");
    }
    let fixed: Vec<(String, i64)> = slice
        .iter()
        .filter(|(n, _)| m.params.contains(n))
        .cloned()
        .collect();
    let fixed_at: Vec<Option<i64>> = m
        .params
        .iter()
        .map(|p| fixed.iter().find(|(n, _)| n == p).map(|(_, v)| *v))
        .collect();
    let free: Vec<usize> = (0..m.params.len())
        .filter(|&k| fixed_at[k].is_none())
        .collect();
    let axis = match free.as_slice() {
        [k] => *k,
        [] if m.params.is_empty() => bail!("model {label} has no size parameter to plot against"),
        [] => bail!(
            "the slice fixes every size parameter of {label} ({}); leave one free to plot against",
            m.params.join(", ")
        ),
        _ => {
            let names: Vec<&str> = free.iter().map(|&k| m.params[k].as_str()).collect();
            // Every free parameter but the last fixed, each at a size the first point was
            // measured at, so that the suggested slice has points on it.
            let first = &m.points[0].0;
            let example: Vec<String> = free[..free.len() - 1]
                .iter()
                .map(|&k| format!("--slice {}={}", m.params[k], first[k]))
                .collect();
            bail!(
                "model {label} has {} free size parameters ({}); a plot has one: fix all but \
                 one with --slice name=value, e.g. {}",
                names.len(),
                names.join(", "),
                example.join(" ")
            )
        }
    };
    let on_slice = |x: &[i64]| {
        x.len() == fixed_at.len()
            && fixed_at
                .iter()
                .zip(x)
                .all(|(f, v)| f.is_none_or(|f| f == *v))
    };
    let full = |v: i64| -> Vec<i64> { fixed_at.iter().map(|f| f.unwrap_or(v)).collect() };

    let points = fpm.points();
    // The assumed zero counts unless a measurement overrides it (as `Fpm` decides).
    let zero = fpm.assumed_zero().filter(|z| {
        if z.len() == 1 {
            !points.iter().any(|(x, _)| x[0] >= z[0])
        } else {
            fpm.vertex(z).is_none()
        }
    });

    // The x range: every vertex's free coordinate (the slice's vertices are their projections).
    let mut xs: Vec<i64> = points.iter().map(|(x, _)| x[axis]).collect();
    xs.extend(zero.map(|z| z[axis]));
    xs.sort_unstable();
    xs.dedup();
    let (lo, hi) = (xs[0], xs[xs.len() - 1]);
    let span = (hi - lo) as f64;
    xs.extend((0..=DENSE_SAMPLES).map(|i| lo + (span * i as f64 / DENSE_SAMPLES as f64) as i64));
    xs.sort_unstable();
    xs.dedup();

    let mut line = Vec::with_capacity(xs.len());
    let mut band = Vec::with_capacity(xs.len());
    for &v in &xs {
        let x = full(v);
        if let (Some(s), Some((bl, bh))) = (fpm.speed(&x), fpm.band(&x)) {
            line.push((v as f64, s / GIGA));
            band.push((v as f64, bl / GIGA, bh / GIGA));
        }
    }

    let samples = points
        .iter()
        .filter(|(x, _)| on_slice(x))
        .map(|(x, s)| Sample {
            x: x[axis] as f64,
            min: s.min / GIGA,
            mean: s.mean / GIGA,
            max: s.max / GIGA,
        })
        .collect();
    let zero = zero.filter(|z| on_slice(z)).map(|z| z[axis] as f64);
    let intervals = fpm
        .slice(&fixed)
        .intervals()
        .iter()
        .filter(|i| i.lo.len() == 1 && i.hi.len() == 1)
        .map(|i| {
            let (a, b) = (i.lo[0].min(i.hi[0]), i.lo[0].max(i.hi[0]));
            (a as f64, b as f64, i.finalised)
        })
        .collect();
    Ok(Curve {
        label,
        free: m.params[axis].clone(),
        fixed,
        line,
        band,
        samples,
        zero,
        intervals,
    })
}

/// "Speed of a/b, c/d against n (m = 3000)", noting sliced models without samples on the slice.
fn default_title(curves: &[Curve]) -> String {
    let labels: Vec<&str> = curves.iter().map(|c| c.label.as_str()).collect();
    let mut title = if labels.len() <= 3 {
        format!("Speed of {}", labels.join(", "))
    } else {
        format!("Speed of {} models", labels.len())
    };
    let mut fixed: Vec<String> = curves
        .iter()
        .flat_map(|c| c.fixed.iter().map(|(n, v)| format!("{n} = {v}")))
        .collect();
    fixed.sort_unstable();
    fixed.dedup();
    if !fixed.is_empty() {
        title.push_str(&format!(" at {}", fixed.join(", ")));
    }
    let unsampled: Vec<&str> = curves
        .iter()
        .filter(|c| !c.fixed.is_empty() && c.samples.is_empty())
        .map(|c| c.label.as_str())
        .collect();
    if !unsampled.is_empty() {
        let whose = if unsampled.len() == curves.len() {
            String::new()
        } else {
            format!(" for {}", unsampled.join(", "))
        };
        title.push_str(&format!(" (no samples on this slice{whose}: interpolated)"));
    }
    title
}

/// Any plotters error as an anyhow error (their error types borrow the backend's).
fn de<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("{e}")
}

/// Tick labels for sizes: integers, in scientific notation when long.
fn size_label(v: &f64) -> String {
    if v.abs() >= 1e7 {
        format!("{v:.2e}")
    } else {
        format!("{}", v.round() as i64)
    }
}

/// The overall x range, widened when degenerate.
fn x_range(curves: &[Curve]) -> (f64, f64) {
    let xs = curves.iter().flat_map(|c| {
        c.line
            .iter()
            .map(|p| p.0)
            .chain(c.samples.iter().map(|s| s.x))
            .chain(c.zero)
            .chain(c.intervals.iter().flat_map(|i| [i.0, i.1]))
    });
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    if span <= 0.0 {
        let pad = (lo.abs() * 0.1).max(1.0);
        return (lo - pad, hi + pad);
    }
    let pad = span * 0.02;
    (lo - pad, hi + pad)
}

/// The highest speed drawn, Gop/s.
fn y_max(curves: &[Curve]) -> f64 {
    let top = curves
        .iter()
        .flat_map(|c| {
            c.line
                .iter()
                .map(|p| p.1)
                .chain(c.band.iter().map(|b| b.2))
                .chain(c.samples.iter().map(|s| s.max))
        })
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    if top > 0.0 { top } else { 1.0 }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    curves: &[Curve],
    title: &str,
) -> Result<()> {
    root.fill(&WHITE).map_err(de)?;
    let (width, _) = root.dim_in_pixel();

    let (x0, x1) = x_range(curves);
    // Headroom above the highest speed for the legend.
    let top = y_max(curves) * 1.3;
    // A strip under speed 0 holds the construction intervals: one lane per model that has any.
    let lanes: Vec<usize> = (0..curves.len())
        .filter(|&i| !curves[i].intervals.is_empty())
        .collect();
    let lane_h = top * 0.03;
    let strip = if lanes.is_empty() {
        0.0
    } else {
        lane_h * (lanes.len() as f64 + 1.0)
    };
    let y0 = -strip;

    let mut frees: Vec<&str> = curves.iter().map(|c| c.free.as_str()).collect();
    frees.dedup();
    let x_desc = format!("{} (problem size)", frees.join(" / "));

    let title_size = if width >= 800 { 22 } else { 16 };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", title_size).into_font())
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..top)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("speed (Gop/s)")
        .x_labels(10)
        .y_labels(10)
        .x_label_formatter(&size_label)
        .y_label_formatter(&|v: &f64| {
            if *v < -1e-12 * top {
                String::new()
            } else {
                format!("{:.3}", v.max(0.0))
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_string()
            }
        })
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(de)?;

    if !lanes.is_empty() {
        // Cover the grid in the strip and separate it from the speeds.
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, y0), (x1, 0.0)],
                RGBColor(248, 248, 248).filled(),
            )))
            .map_err(de)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x0, 0.0), (x1, 0.0)],
                BLACK.mix(0.6).stroke_width(1),
            )))
            .map_err(de)?;
    }

    // Bands first, so that every model's line and samples lie on top of all bands.
    for (i, c) in curves.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        if c.band.len() >= 2 {
            let outline: Vec<(f64, f64)> = c
                .band
                .iter()
                .map(|b| (b.0, b.2))
                .chain(c.band.iter().rev().map(|b| (b.0, b.1)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline,
                    colour.mix(0.18).filled(),
                )))
                .map_err(de)?;
        }
    }

    for (i, c) in curves.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let line_style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(c.line.iter().copied(), line_style))
            .map_err(de)?
            .label(c.label.as_str())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (22, 0)], colour.stroke_width(2))
                    + Circle::new((11, 0), 3, colour.filled())
            });
        chart
            .draw_series(c.samples.iter().map(|s| {
                ErrorBar::new_vertical(s.x, s.min, s.mean, s.max, colour.stroke_width(1), 6)
            }))
            .map_err(de)?;
        chart
            .draw_series(c.samples.iter().map(|s| {
                EmptyElement::at((s.x, s.mean))
                    + Circle::new((0, 0), 4, colour.filled())
                    + Circle::new((0, 0), 4, WHITE.stroke_width(1))
            }))
            .map_err(de)?;
        if let Some(z) = c.zero {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((z, 0.0))
                        + Circle::new((0, 0), 7, WHITE.filled())
                        + Circle::new((0, 0), 7, colour.stroke_width(2))
                        + Cross::new((0, 0), 4, colour.stroke_width(2)),
                ))
                .map_err(de)?;
        }
    }

    for (lane, &i) in lanes.iter().enumerate() {
        let c = &curves[i];
        let colour = PALETTE[i % PALETTE.len()];
        let y = -lane_h * (lane as f64 + 1.0);
        chart
            .draw_series(c.intervals.iter().map(|&(a, b, finalised)| {
                let style = if finalised {
                    colour.stroke_width(3)
                } else {
                    OPEN_GREY.stroke_width(3)
                };
                PathElement::new(vec![(a, y), (b, y)], style)
            }))
            .map_err(de)?;
        // Ticks at the ends, so that adjacent intervals stay apart.
        chart
            .draw_series(c.intervals.iter().flat_map(|&(a, b, finalised)| {
                let style = if finalised {
                    colour.stroke_width(1)
                } else {
                    OPEN_GREY.stroke_width(1)
                };
                [a, b].map(move |x| {
                    EmptyElement::at((x, y)) + PathElement::new(vec![(0, -5), (0, 5)], style)
                })
            }))
            .map_err(de)?;
    }

    // Legend entries for the markers shared by all models.
    if curves.iter().any(|c| !c.samples.is_empty()) {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(de)?
            .label("measured: mean, min–max")
            .legend(|(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(11, -6), (11, 6)], BLACK.stroke_width(1))
                    + PathElement::new(vec![(8, -6), (14, -6)], BLACK.stroke_width(1))
                    + PathElement::new(vec![(8, 6), (14, 6)], BLACK.stroke_width(1))
                    + Circle::new((11, 0), 4, BLACK.filled())
            });
    }
    if curves.iter().any(|c| c.band.len() >= 2) {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(de)?
            .label("interpolated min–max band")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 22, y + 5)], BLACK.mix(0.18).filled())
            });
    }
    if curves.iter().any(|c| c.zero.is_some()) {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(de)?
            .label("assumed zero (not measured)")
            .legend(|(x, y)| {
                EmptyElement::at((x + 11, y))
                    + Circle::new((0, 0), 6, BLACK.stroke_width(2))
                    + Cross::new((0, 0), 3, BLACK.stroke_width(2))
            });
    }
    if !lanes.is_empty() {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(de)?
            .label("construction intervals (grey: open)")
            .legend(|(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (10, 0)], BLACK.stroke_width(3))
                    + PathElement::new(vec![(12, 0), (22, 0)], OPEN_GREY.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(190, 190, 190))
        .draw()
        .map_err(de)?;

    root.present().map_err(de)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::{BuildInterval, BuildState, ModelProgress, PointStats};

    fn stats(mean: f64) -> PointStats {
        PointStats {
            sd: 0.0,
            count: 3,
            min: mean * 0.9,
            mean,
            max: mean * 1.08,
        }
    }

    fn progress(intervals: Vec<BuildInterval>) -> Option<ModelProgress> {
        Some(ModelProgress {
            service: "matmul".into(),
            method: "gbbp".into(),
            state: BuildState::Building,
            points: 6,
            runs: 18,
            bench_time_s: 1.0,
            intervals,
        })
    }

    fn interval(lo: Vec<i64>, hi: Vec<i64>, finalised: bool) -> BuildInterval {
        BuildInterval { lo, hi, finalised }
    }

    /// A 1-D model: speed rises, then falls when it starts paging; assumed zero at 6000.
    fn model_1d(server: &str, scale: f64) -> ModelExport {
        let pts = [
            (100, 1.2e9),
            (500, 2.6e9),
            (1000, 3.1e9),
            (2000, 3.0e9),
            (3000, 2.2e9),
            (4000, 0.6e9),
        ];
        ModelExport {
            server: server.into(),
            service: "matmul".into(),
            params: vec!["n".into()],
            complexity: Some("2*n^3".into()),
            points: pts
                .iter()
                .map(|&(x, s)| (vec![x], stats(s * scale)))
                .collect(),
            assumed_zero: Some(vec![6000]),
            progress: progress(vec![
                interval(vec![100], vec![500], true),
                interval(vec![500], vec![1000], true),
                interval(vec![1000], vec![2000], true),
                interval(vec![2000], vec![3000], true),
                interval(vec![3000], vec![4000], false),
                interval(vec![4000], vec![6000], false),
            ]),
        }
    }

    /// A 2-D model over (m, n) on a grid m, n ∈ {1000, 2000, 3000}.
    fn model_2d() -> ModelExport {
        let mut points = Vec::new();
        for m in [1000, 2000, 3000] {
            for n in [1000, 2000, 3000] {
                let s = 4e9 - (m as f64 * n as f64) * 2e2;
                points.push((vec![m, n], stats(s)));
            }
        }
        ModelExport {
            server: "beta".into(),
            service: "dgemm".into(),
            params: vec!["m".into(), "n".into()],
            complexity: None,
            points,
            assumed_zero: None,
            progress: progress(vec![
                interval(vec![2000, 1000], vec![2000, 2000], true),
                interval(vec![2000, 2000], vec![2000, 3000], false),
                interval(vec![1000, 1000], vec![2000, 1000], true),
            ]),
        }
    }

    fn opts(path: PathBuf, slice: &[(&str, i64)]) -> PlotOptions {
        PlotOptions {
            slice: slice.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            ..PlotOptions::new(path)
        }
    }

    fn png_size(bytes: &[u8]) -> (u32, u32) {
        assert!(bytes.len() > 24);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        assert_eq!(&bytes[12..16], b"IHDR");
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        (w, h)
    }

    #[test]
    fn plot_1d_models_to_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let models = [model_1d("alpha", 1.0), model_1d("gamma", 0.7)];
        let svg = dir.path().join("models.svg");
        plot_models(&models, &opts(svg.clone(), &[])).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.len() > 2000);
        assert!(text.contains("alpha/matmul"));
        assert!(text.contains("gamma/matmul"));
        assert!(text.contains("speed (Gop/s)"));

        let png = dir.path().join("models.PNG");
        let o = PlotOptions {
            width: 800,
            height: 500,
            ..opts(png.clone(), &[])
        };
        plot_models(&models, &o).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.len() > 5000);
        assert_eq!(png_size(&bytes), (800, 500));
    }

    #[test]
    fn plot_sliced_2d_model() {
        let dir = tempfile::tempdir().unwrap();
        let models = [model_2d()];
        let svg = dir.path().join("sliced.svg");
        plot_models(&models, &opts(svg.clone(), &[("m", 2000)])).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("beta/dgemm"));
        assert!(text.contains("m = 2000"));
        assert!(!text.contains("no samples"));

        let png = dir.path().join("sliced.png");
        plot_models(&models, &opts(png.clone(), &[("m", 2000)])).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(png_size(&bytes), (1000, 600));

        // Off the grid: the line is interpolated and the title says so.
        let svg = dir.path().join("between.svg");
        plot_models(&models, &opts(svg.clone(), &[("n", 2500)])).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("no samples on this slice"));
    }

    #[test]
    fn sliced_curve_follows_the_model_and_keeps_on_slice_samples() {
        let m = model_2d();
        let c = curve(&m, &[("m".into(), 2000)]).unwrap();
        assert_eq!(c.free, "n");
        assert_eq!(c.samples.len(), 3);
        let fpm = build_fpm(&m);
        for &(x, s) in &c.line {
            let want = fpm.speed(&[2000, x as i64]).unwrap() / GIGA;
            assert!((s - want).abs() < 1e-12);
        }
        // On-plane intervals only: the two along n at m = 2000.
        assert_eq!(c.intervals.len(), 2);
        assert!(c.zero.is_none());

        let c = curve(&model_1d("alpha", 1.0), &[]).unwrap();
        assert_eq!(c.zero, Some(6000.0));
        assert_eq!(c.line.last().unwrap().1, 0.0);
    }

    #[test]
    fn errors_are_readable() {
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("x.svg");

        let e = plot_models(&[], &opts(svg.clone(), &[])).unwrap_err();
        assert!(e.to_string().contains("no models"), "{e}");

        let mut empty = model_1d("alpha", 1.0);
        empty.points.clear();
        let e = plot_models(&[empty], &opts(svg.clone(), &[])).unwrap_err();
        assert!(e.to_string().contains("alpha/matmul has no points"), "{e}");

        let e = plot_models(&[model_2d()], &opts(svg.clone(), &[("k", 3)])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unknown slice parameter k"), "{msg}");
        assert!(msg.contains("m, n"), "{msg}");

        let e = plot_models(&[model_2d()], &opts(svg.clone(), &[])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("(m, n)"), "{msg}");
        assert!(msg.contains("e.g. --slice m=1000"), "{msg}");
        // Three free parameters (a dgemm's m, n, k): the hint fixes two, and following it
        // draws the plot.
        let mut three = model_2d();
        three.params.push("k".into());
        for (x, _) in &mut three.points {
            x.push(500);
        }
        three.progress = None;
        let e = plot_models(std::slice::from_ref(&three), &opts(svg.clone(), &[])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("e.g. --slice m=1000 --slice n=1000"), "{msg}");
        let drawn = dir.path().join("three.svg");
        plot_models(&[three], &opts(drawn.clone(), &[("m", 1000), ("n", 1000)])).unwrap();
        assert!(drawn.exists());

        let e =
            plot_models(&[model_1d("alpha", 1.0)], &opts(svg.clone(), &[("n", 3)])).unwrap_err();
        assert!(e.to_string().contains("leave one free"), "{e}");

        let pdf = dir.path().join("x.pdf");
        let e = plot_models(&[model_1d("alpha", 1.0)], &opts(pdf, &[])).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(".pdf") && msg.contains(".svg and .png"),
            "{msg}"
        );
        assert!(!svg.exists());
    }
}
