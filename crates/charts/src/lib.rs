//! Charts, to SVG or PNG: performance models (speed against size, [`models`]), task-graph
//! timelines (Gantt charts, [`gantt`]) and predicted intervals against actual times
//! ([`predictions`]). Text is drawn with the embedded DejaVu Sans font, so
//! PNGs render on machines without any system fonts.

pub mod gantt;
pub mod models;
pub mod predictions;

pub use gantt::{ChartServer, Slot, Timeline};
pub use models::{PlotOptions, plot_models};

use anyhow::{Result, anyhow, bail};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Image formats charts are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.svg`
    Svg,
    /// `.png`
    Png,
}

/// The format `path`'s extension asks for; `what` names the chart in the error.
pub fn format_of(path: &Path, what: &str) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        Some(e) => bail!(
            "cannot write {what} to {}: .{e} is not supported; supported formats are .svg and .png (the file name must end in .svg or .png)",
            path.display()
        ),
        None => bail!(
            "cannot write {what} to {}: no file extension; supported formats are .svg and .png (the file name must end in .svg or .png)",
            path.display()
        ),
    }
}

/// Distinct colours for overlaid models and Gantt bars (Tableau 10).
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Registers the embedded DejaVu Sans as plotters' sans-serif font (once per process).
pub(crate) fn register_fonts() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        let regular = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        )
        .is_ok();
        let bold =
            plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
                .is_ok();
        regular && bold
    });
    if ok {
        Ok(())
    } else {
        Err(anyhow!("cannot load the embedded DejaVu Sans font"))
    }
}
