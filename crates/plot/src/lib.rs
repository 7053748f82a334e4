//! Plots for the planner and the bench lab: a [`Scene`] (lines, circles, rectangles, text)
//! drawn once and rendered to SVG or to PNG pixels, so both files show the same drawing;
//! and [`bars`], the grouped bar chart of the lab's studies.

pub mod bars;
mod png;
mod raster;
pub mod scene;
mod svg;

use std::path::Path;

pub use scene::{text_width, Anchor, Rgb, Scene};

/// SVG text of a scene.
pub fn to_svg(scene: &Scene) -> String {
    svg::to_svg(scene)
}

/// PNG bytes of a scene.
pub fn to_png(scene: &Scene) -> Vec<u8> {
    png::encode_png(&raster::rasterize(scene))
}

/// Round tick step giving at most about 8 ticks over `span`.
pub fn tick_step(span: f64) -> f64 {
    let raw = (span / 6.0).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|step| span / step <= 8.0)
        .unwrap_or(10.0 * magnitude)
}

/// A plot file's format, from its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    /// `.svg` or `.png` (any case); None for anything else.
    pub fn of(path: &Path) -> Option<Format> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Some(Format::Svg),
            Some("png") => Some(Format::Png),
            _ => None,
        }
    }
}

/// The bytes of `scene` in `format`.
pub fn render(scene: &Scene, format: Format) -> Vec<u8> {
    match format {
        Format::Svg => to_svg(scene).into_bytes(),
        Format::Png => to_png(scene),
    }
}
