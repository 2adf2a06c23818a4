//! The predicted timeline as a Gantt chart (SVG or PNG): one row per server (split into one lane
//! per slot it uses at once), one bar per task labelled with its name and coloured by service,
//! time in seconds along the bottom, a line at the lower bound, and the policy and predicted
//! makespan in the title.

use crate::{Format, PALETTE, register_fonts};
use anyhow::{Context, Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// The format `path`'s extension asks for, or an error naming the supported ones.
pub fn check_format(path: &Path) -> Result<Format> {
    crate::format_of(path, "a Gantt chart")
}

/// One task on a server's timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    /// The task (index into [`Timeline::tasks`]).
    pub task: usize,
    /// The slot of its server it runs in.
    pub lane: usize,
    /// When it starts, s.
    pub start_s: f64,
    /// When it ends, s.
    pub end_s: f64,
}

/// A server of a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartServer {
    pub name: String,
    /// Calls it runs at once.
    pub slots: usize,
}

/// What a Gantt chart draws: servers and what ran (or would run) on each, when.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The mapping policy, for the title.
    pub policy: String,
    /// The servers, one row each.
    pub servers: Vec<ChartServer>,
    /// Each task's name and service (bars are labelled by name, coloured by service).
    pub tasks: Vec<(String, String)>,
    /// Each server's tasks, aligned with `servers`.
    pub per_server: Vec<Vec<Slot>>,
    /// When the last task ends, s.
    pub makespan_s: f64,
    /// No schedule can finish sooner, s (drawn as a line).
    pub lower_bound_s: f64,
}

/// Lighter version of a palette colour (mixed with white), for bars with black labels.
fn light(c: RGBColor) -> RGBColor {
    let m = |x: u8| (x as f64 * 0.55 + 255.0 * 0.45).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

const WIDTH: u32 = 1100;
/// Pixels per lane.
const LANE_PX: u32 = 46;

/// One horizontal lane of the chart.
struct Lane {
    server: usize,
    lane: usize,
}

/// Draws `pred`'s timeline to `path` (.svg or .png); `name` (the graph file's) goes in the title.
pub fn draw(pred: &Timeline, path: &Path, name: &str) -> Result<()> {
    let title = format!(
        "{name}: {} on {} server(s), predicted makespan {} s",
        pred.policy,
        pred.servers.len(),
        seconds_label(pred.makespan_s, pred.makespan_s / 10.0)
    );
    draw_charts(&[(pred, title)], path)
}

/// Draws the predicted timeline above the actual one (same time axis), after a run.
pub fn draw_pair(predicted: &Timeline, actual: &Timeline, path: &Path, name: &str) -> Result<()> {
    let (p, a) = (predicted.makespan_s, actual.makespan_s);
    let top = format!(
        "{name}: {} on {} server(s), predicted makespan {} s",
        predicted.policy,
        predicted.servers.len(),
        seconds_label(p, p / 10.0)
    );
    let bottom = format!("actual run: makespan {} s", seconds_label(a, a / 10.0));
    draw_charts(&[(predicted, top), (actual, bottom)], path)
}

/// Stacks one chart per `(timeline, title)` on a shared time axis.
fn draw_charts(charts: &[(&Timeline, String)], path: &Path) -> Result<()> {
    let format = check_format(path)?;
    register_fonts()?;
    let layouts: Vec<(Vec<Lane>, Vec<Vec<usize>>)> =
        charts.iter().map(|(p, _)| layout(p)).collect();
    let heights: Vec<u32> = layouts
        .iter()
        .map(|(lanes, _)| (150 + LANE_PX * lanes.len() as u32).min(4000))
        .collect();
    let x_max = charts.iter().map(|(p, _)| p.makespan_s).fold(0.0, f64::max);
    let x_max = if x_max > 0.0 { x_max * 1.04 } else { 1.04 };
    let size = (WIDTH, heights.iter().sum());
    let drawn = match format {
        Format::Svg => draw_stack(
            SVGBackend::new(path, size).into_drawing_area(),
            charts,
            &layouts,
            &heights,
            x_max,
        ),
        Format::Png => draw_stack(
            BitMapBackend::new(path, size).into_drawing_area(),
            charts,
            &layouts,
            &heights,
            x_max,
        ),
    };
    drawn.with_context(|| format!("cannot draw the Gantt chart to {}", path.display()))
}

fn draw_stack<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    charts: &[(&Timeline, String)],
    layouts: &[(Vec<Lane>, Vec<Vec<usize>>)],
    heights: &[u32],
    x_max: f64,
) -> Result<()> {
    root.fill(&WHITE).map_err(de)?;
    let mut rest = root;
    for (i, ((pred, title), (lanes, shown))) in charts.iter().zip(layouts).enumerate() {
        let area = if i + 1 < charts.len() {
            let (top, bottom) = rest.split_vertically(heights[i]);
            rest = bottom;
            top
        } else {
            rest.clone()
        };
        draw_on(area, pred, lanes, shown, title, x_max)?;
    }
    // Written once, after every chart: presenting a sub-area would write the file early.
    rest.present().map_err(de)?;
    Ok(())
}

/// The lanes each server needs (one per slot it uses at once) and each task's lane.
fn layout(pred: &Timeline) -> (Vec<Lane>, Vec<Vec<usize>>) {
    let shown: Vec<Vec<usize>> = pred
        .per_server
        .iter()
        .map(|slots| display_lanes(slots))
        .collect();
    let mut lanes = Vec::new();
    for (s, l) in shown.iter().enumerate() {
        let used = l.iter().map(|k| k + 1).max().unwrap_or(1);
        lanes.extend((0..used).map(|lane| Lane { server: s, lane }));
    }
    (lanes, shown)
}

/// Whole-image pixel `p` in the coordinates of an area whose corner is at `base`.
fn shift(p: (i32, i32), base: (i32, i32)) -> (i32, i32) {
    (p.0 - base.0, p.1 - base.1)
}

fn de<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("{e}")
}

/// Tick labels: about three significant digits, no trailing zeros.
fn seconds_label(v: f64, span: f64) -> String {
    let d = if span > 0.0 {
        (2 - span.log10().floor() as i64).clamp(0, 6) as usize
    } else {
        3
    };
    let s = format!("{v:.d$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    pred: &Timeline,
    lanes: &[Lane],
    shown: &[Vec<usize>],
    title: &str,
    x_max: f64,
) -> Result<()> {
    // The chart maps to whole-image pixels, text is drawn in this area's: shift by its corner.
    let corner = root.get_base_pixel();
    let servers = &pred.servers;
    let lb = pred.lower_bound_s;
    let span = x_max / 1.04;
    let n = lanes.len() as f64;
    // One extra half-lane on top holds the lower-bound label.
    let y_top = n + 0.5;

    let label_font = ("sans-serif", 15).into_font().color(&BLACK);
    let label_w = servers
        .iter()
        .map(|s| {
            root.estimate_text_size(&s.name, &label_font)
                .map(|(w, _)| w)
                .unwrap_or(80)
        })
        .max()
        .unwrap_or(60)
        .clamp(40, 260);

    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20).into_font())
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(label_w + 18)
        .build_cartesian_2d(0.0..x_max, 0.0..y_top)
        .map_err(de)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(12)
        .x_desc("time (s)")
        .x_label_formatter(&|v: &f64| seconds_label(*v, span))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .max_light_lines(4)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(220, 220, 220))
        .draw()
        .map_err(de)?;

    // Lane k (from the top) spans y in [n-k-1, n-k].
    let lane_index = |server: usize, lane: usize| {
        lanes
            .iter()
            .position(|l| l.server == server && l.lane == lane)
            .unwrap_or(0)
    };
    // Alternate server bands get a light background, and a rule separates servers.
    for (s, server) in servers.iter().enumerate() {
        let rows: Vec<usize> = (0..lanes.len()).filter(|&k| lanes[k].server == s).collect();
        let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
            continue;
        };
        let (top, bottom) = (n - first as f64, n - last as f64 - 1.0);
        if s % 2 == 1 {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, bottom), (x_max, top)],
                    RGBColor(246, 246, 250).filled(),
                )))
                .map_err(de)?;
        }
        if s > 0 {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, top), (x_max, top)],
                    RGBColor(200, 200, 200).stroke_width(1),
                )))
                .map_err(de)?;
        }
        let (px, py) = shift(chart.backend_coord(&(0.0, (top + bottom) / 2.0)), corner);
        let style = label_font.pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(server.name.clone(), (px - 10, py), style))
            .map_err(de)?;
        if pred.per_server[s].is_empty() {
            let grey = ("sans-serif", 13)
                .into_font()
                .color(&RGBColor(120, 120, 120));
            root.draw(&Text::new(
                "idle",
                (px + 8, py),
                grey.pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(de)?;
        }
    }

    let mut services: Vec<&str> = Vec::new();
    for (_, service) in &pred.tasks {
        if !services.contains(&service.as_str()) {
            services.push(service);
        }
    }
    let colour_of = |service: &str| {
        let i = services.iter().position(|s| *s == service).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };

    let inset = 0.14;
    // Calls too short to see at this scale are drawn 2 pixels wide, so none goes missing.
    let (plot_left, _) = shift(chart.backend_coord(&(0.0, 0.0)), corner);
    let (plot_right, _) = shift(chart.backend_coord(&(x_max, 0.0)), corner);
    let min_w = 2.0 * x_max / f64::from((plot_right - plot_left).max(1));
    for (s, slots) in pred.per_server.iter().enumerate() {
        for (x, &lane) in slots.iter().zip(&shown[s]) {
            let k = lane_index(s, lane) as f64;
            let (y0, y1) = (n - k - 1.0 + inset, n - k - inset);
            let (task_name, task_service) = &pred.tasks[x.task];
            let base = colour_of(task_service);
            let end = x.end_s.max(x.start_s + min_w);
            chart
                .draw_series([
                    Rectangle::new([(x.start_s, y0), (end, y1)], light(base).filled()),
                    Rectangle::new([(x.start_s, y0), (end, y1)], base.stroke_width(1)),
                ])
                .map_err(de)?;
            // The name inside the bar if it fits, shortened with an ellipsis if not, left out
            // if not even one letter fits.
            let (left, mid) = shift(chart.backend_coord(&(x.start_s, (y0 + y1) / 2.0)), corner);
            let (right, _) = shift(chart.backend_coord(&(end, (y0 + y1) / 2.0)), corner);
            let room = (right - left - 6).max(0) as u32;
            let font = ("sans-serif", 13).into_font().color(&BLACK);
            if let Some(text) = fit(task_name, room, |t| {
                root.estimate_text_size(t, &font)
                    .map(|(w, _)| w)
                    .unwrap_or(u32::MAX)
            }) {
                let style = font.pos(Pos::new(HPos::Center, VPos::Center));
                root.draw(&Text::new(text, ((left + right) / 2, mid), style))
                    .map_err(de)?;
            }
        }
    }

    // The lower bound: no mapping finishes before it.
    if lb > 0.0 && lb.is_finite() {
        let red = RGBColor(200, 30, 30);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(lb, 0.0), (lb, n + 0.05)],
                red.mix(0.8).stroke_width(2),
            )))
            .map_err(de)?;
        let (px, py) = shift(chart.backend_coord(&(lb, n + 0.25)), corner);
        let text = format!("lower bound {} s", seconds_label(lb, span / 10.0));
        let font = ("sans-serif", 13).into_font().color(&red);
        let w = root
            .estimate_text_size(&text, &font)
            .map(|(w, _)| w as i32)
            .unwrap_or(0);
        let (right_edge, _) = shift(chart.backend_coord(&(x_max, 0.0)), corner);
        // Right of the line if there is room, else left of it.
        let (x, h) = if px + 6 + w <= right_edge {
            (px + 6, HPos::Left)
        } else {
            (px - 6, HPos::Right)
        };
        root.draw(&Text::new(
            text,
            (x, py),
            font.pos(Pos::new(h, VPos::Center)),
        ))
        .map_err(de)?;
    }

    if services.len() > 1 {
        // A legend of services in the top strip, from the left.
        let (mut x, y) = shift(chart.backend_coord(&(0.0, n + 0.25)), corner);
        x += 6;
        let font = ("sans-serif", 13).into_font().color(&BLACK);
        for svc in &services {
            let c = colour_of(svc);
            root.draw(&Rectangle::new(
                [(x, y - 6), (x + 14, y + 6)],
                light(c).filled(),
            ))
            .map_err(de)?;
            root.draw(&Rectangle::new(
                [(x, y - 6), (x + 14, y + 6)],
                c.stroke_width(1),
            ))
            .map_err(de)?;
            root.draw(&Text::new(
                svc.to_string(),
                (x + 19, y),
                font.pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(de)?;
            let w = root
                .estimate_text_size(svc, &font)
                .map(|(w, _)| w as i32)
                .unwrap_or(60);
            x += 19 + w + 18;
        }
    }
    Ok(())
}

/// The lane each task of one server's timeline is drawn in: the lowest lane free at its start,
/// taking tasks by start time. The replay's own lanes are as good for the timing but scatter a
/// chain over a multi-slot server's lanes; this keeps back-to-back tasks on one line and uses
/// no more lanes than the most tasks running at once.
fn display_lanes(slots: &[Slot]) -> Vec<usize> {
    let mut by_start: Vec<usize> = (0..slots.len()).collect();
    by_start.sort_by(|&a, &b| {
        slots[a]
            .start_s
            .total_cmp(&slots[b].start_s)
            .then(a.cmp(&b))
    });
    let mut free_at: Vec<f64> = Vec::new();
    let mut lane = vec![0; slots.len()];
    for i in by_start {
        let x = slots[i];
        // A tolerance, so a task starting exactly when another ends (up to rounding) follows it.
        let tol = 1e-9 * x.start_s.abs().max(1e-9);
        let k = match free_at.iter().position(|&f| f <= x.start_s + tol) {
            Some(k) => k,
            None => {
                free_at.push(0.0);
                free_at.len() - 1
            }
        };
        free_at[k] = x.end_s;
        lane[i] = k;
    }
    lane
}

/// `name`, or its longest prefix followed by `…`, whose width (by `width`) is at most `room`;
/// `None` if not even one character and the ellipsis fit.
fn fit(name: &str, room: u32, width: impl Fn(&str) -> u32) -> Option<String> {
    if width(name) <= room {
        return Some(name.to_string());
    }
    let chars: Vec<char> = name.chars().collect();
    (1..chars.len())
        .rev()
        .map(|k| format!("{}…", chars[..k].iter().collect::<String>()))
        .find(|s| width(s) <= room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(check_format(Path::new("g.SVG")).unwrap(), Format::Svg);
        assert_eq!(check_format(Path::new("a/g.png")).unwrap(), Format::Png);
        let e = check_format(Path::new("g.pdf")).unwrap_err();
        assert!(e.to_string().contains(".svg or .png"), "{e}");
        assert!(check_format(Path::new("g")).is_err());
    }

    /// a → b, a → c: all three in a row on s1 (1 + 3 + 1 s), s2 idle; lower bound 4 s.
    fn fork() -> Timeline {
        let slot = |task, start_s, end_s| Slot {
            task,
            lane: 0,
            start_s,
            end_s,
        };
        Timeline {
            policy: "round-robin".into(),
            servers: vec![
                ChartServer {
                    name: "s1".into(),
                    slots: 1,
                },
                ChartServer {
                    name: "s2".into(),
                    slots: 2,
                },
            ],
            tasks: ["a", "b", "c"]
                .iter()
                .map(|n| (n.to_string(), "dgemm".to_string()))
                .collect(),
            per_server: vec![
                vec![slot(0, 0.0, 1.0), slot(1, 1.0, 4.0), slot(2, 4.0, 5.0)],
                vec![],
            ],
            makespan_s: 5.0,
            lower_bound_s: 4.0,
        }
    }

    #[test]
    fn draws_svg_and_png() {
        let pred = fork();
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("g.svg");
        draw(&pred, &svg, "fork.json").unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("round-robin"), "title in the SVG");
        // Text elements hold their text on a line of its own.
        for name in ["s1", "s2", "a", "b", "c", "lower bound 4 s"] {
            assert!(
                text.contains(&format!("\n{name}\n</text>")),
                "{name} missing from the SVG"
            );
        }
        let png = dir.path().join("g.png");
        draw(&pred, &png, "fork.json").unwrap();
        // After a run: predicted above actual, both titled.
        let pair = dir.path().join("pair.svg");
        draw_pair(&pred, &pred, &pair, "fork.json").unwrap();
        let text = std::fs::read_to_string(&pair).unwrap();
        for title in ["predicted makespan", "actual run: makespan"] {
            assert!(text.contains(title), "{title} missing from the SVG");
        }
        assert_eq!(text.matches("\nlower bound 4 s\n</text>").count(), 2);
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }

    #[test]
    fn chains_stay_on_one_lane() {
        let slot = |task, lane, start_s, end_s| Slot {
            task,
            lane,
            start_s,
            end_s,
        };
        // The replay alternates lanes along a chain; two tasks overlap once.
        let slots = [
            slot(0, 0, 0.0, 1.0),
            slot(1, 1, 1.0, 2.0),
            slot(2, 0, 2.0, 3.0),
            slot(3, 1, 2.0, 2.5),
            slot(4, 1, 3.0, 4.0),
        ];
        assert_eq!(display_lanes(&slots), [0, 0, 0, 1, 0]);
        assert!(display_lanes(&[]).is_empty());
    }

    #[test]
    fn labels_shrink_to_fit() {
        let w = |s: &str| s.chars().count() as u32 * 10;
        assert_eq!(fit("gemm_3", 60, w).as_deref(), Some("gemm_3"));
        assert_eq!(fit("gemm_3", 40, w).as_deref(), Some("gem…"));
        assert_eq!(fit("gemm_3", 15, w), None);
        assert_eq!(seconds_label(0.25, 1.0), "0.25");
        assert_eq!(seconds_label(120.0, 500.0), "120");
    }
}
