//! Predicted intervals against actual times, call by call: what `gridwise bench predict --csv`
//! wrote, one panel per load. Each call is a vertical bar (the predictor's 90% interval), a
//! dot (its mean) and a cross (the time the call took): green inside the interval, red outside.
//! Whether the intervals are honest shows at a glance: about one cross in ten should be red.

use crate::{Format, PALETTE, format_of, register_fonts};
use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One timed call as the benchmark recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct PredictedCall {
    pub load: String,
    pub predictor: String,
    pub actual_s: f64,
    pub predicted_s: f64,
    pub low90_s: f64,
    pub high90_s: f64,
}

/// Reads the benchmark's CSV (header `load,predictor,call,actual_s,predicted_s,low90_s,high90_s`).
pub fn read_csv(path: &Path) -> Result<Vec<PredictedCall>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    // Later columns (where the estimate came from) are not drawn.
    if !header
        .trim()
        .starts_with("load,predictor,call,actual_s,predicted_s,low90_s,high90_s")
    {
        bail!(
            "{} is not a `gridwise bench predict --csv` file (its first line is `{header}`)",
            path.display()
        );
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<&str> = l.split(',').collect();
            let num = |k: usize| -> Result<f64> {
                f.get(k).and_then(|v| v.trim().parse().ok()).ok_or_else(|| {
                    anyhow!("{} line {}: bad number in `{l}`", path.display(), i + 2)
                })
            };
            if f.len() < 7 {
                bail!(
                    "{} line {}: at least 7 fields expected, got `{l}`",
                    path.display(),
                    i + 2
                );
            }
            Ok(PredictedCall {
                load: f[0].to_string(),
                predictor: f[1].to_string(),
                actual_s: num(3)?,
                predicted_s: num(4)?,
                low90_s: num(5)?,
                high90_s: num(6)?,
            })
        })
        .collect()
}

/// Draws `predictor`'s calls from `calls` to `output` (`.svg` or `.png`).
pub fn plot_predictions(calls: &[PredictedCall], predictor: &str, output: &Path) -> Result<()> {
    let format = format_of(output, "a plot")?;
    let mut loads: Vec<&str> = Vec::new();
    for c in calls.iter().filter(|c| c.predictor == predictor) {
        if !loads.contains(&c.load.as_str()) {
            loads.push(&c.load);
        }
    }
    if loads.is_empty() {
        let mut known: Vec<&str> = calls.iter().map(|c| c.predictor.as_str()).collect();
        known.sort_unstable();
        known.dedup();
        bail!(
            "no calls of predictor `{predictor}` to plot (the file has: {})",
            known.join(", ")
        );
    }
    register_fonts()?;
    let size = (1100, 300 * loads.len() as u32);
    let drawn = match format {
        Format::Svg => draw(
            SVGBackend::new(output, size).into_drawing_area(),
            calls,
            predictor,
            &loads,
        ),
        Format::Png => draw(
            BitMapBackend::new(output, size).into_drawing_area(),
            calls,
            predictor,
            &loads,
        ),
    };
    drawn.with_context(|| format!("cannot draw the plot to {}", output.display()))
}

fn de<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("{e:?}")
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    calls: &[PredictedCall],
    predictor: &str,
    loads: &[&str],
) -> Result<()> {
    root.fill(&WHITE).map_err(de)?;
    let inside = PALETTE[2];
    let outside = PALETTE[1];
    for (panel, load) in root.split_evenly((loads.len(), 1)).iter().zip(loads) {
        let mine: Vec<&PredictedCall> = calls
            .iter()
            .filter(|c| c.predictor == predictor && c.load == *load)
            .collect();
        let covered = mine
            .iter()
            .filter(|c| c.low90_s <= c.actual_s && c.actual_s <= c.high90_s)
            .count();
        let ppe = mine
            .iter()
            .map(|c| (c.predicted_s - c.actual_s).abs() / c.actual_s)
            .sum::<f64>()
            / mine.len() as f64;
        let top = mine
            .iter()
            .map(|c| c.high90_s.max(c.actual_s))
            .fold(0.0, f64::max)
            * 1.08;
        let caption = format!(
            "{load} ({predictor}): {} calls, mean error {:.1}%, 90% interval held {:.0}%",
            mine.len(),
            ppe * 100.0,
            covered as f64 * 100.0 / mine.len() as f64
        );
        let n = mine.len() as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 16).into_font())
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..n - 0.5, 0.0..top.max(1e-6))
            .map_err(de)?;
        chart
            .configure_mesh()
            .x_desc("call")
            .y_desc("time (s)")
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .map_err(de)?;
        for (i, c) in mine.iter().enumerate() {
            let x = i as f64;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, c.low90_s), (x, c.high90_s)],
                    PALETTE[0].mix(0.45).stroke_width(5),
                )))
                .map_err(de)?;
            chart
                .draw_series(std::iter::once(Circle::new(
                    (x, c.predicted_s),
                    3,
                    PALETTE[0].filled(),
                )))
                .map_err(de)?;
            let held = c.low90_s <= c.actual_s && c.actual_s <= c.high90_s;
            chart
                .draw_series(std::iter::once(Cross::new(
                    (x, c.actual_s),
                    4,
                    (if held { inside } else { outside }).stroke_width(2),
                )))
                .map_err(de)?;
        }
    }
    root.present().map_err(de)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_benchmark_csv_and_draws_one_panel_per_load() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("p.csv");
        std::fs::write(
            &csv,
            "load,predictor,call,actual_s,predicted_s,low90_s,high90_s\n\
             random,forecast,0,0.5,0.45,0.4,0.6\n\
             random,forecast,1,0.9,0.5,0.4,0.6\n\
             steady,forecast,0,0.2,0.21,0.19,0.23\n\
             steady,band,0,0.2,0.4,0.3,0.5\n",
        )
        .unwrap();
        let calls = read_csv(&csv).unwrap();
        assert_eq!(calls.len(), 4);
        let out = dir.path().join("p.svg");
        plot_predictions(&calls, "forecast", &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.contains("random (forecast): 2 calls"), "{svg}");
        assert!(svg.contains("90% interval held 50%"));
        let e = plot_predictions(&calls, "regression", &out).unwrap_err();
        assert!(e.to_string().contains("band, forecast"), "{e}");
        std::fs::write(&csv, "a,b\n").unwrap();
        assert!(read_csv(&csv).unwrap_err().to_string().contains("not a"));
    }
}
