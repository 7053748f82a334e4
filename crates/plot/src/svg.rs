//! Scene → SVG text.

use crate::scene::{glyph_advance, Anchor, Scene, Shape};
use std::fmt::Write;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn to_svg(scene: &Scene) -> String {
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"{bg}\"/>\n",
        w = scene.width,
        h = scene.height,
        bg = scene.background.hex()
    );
    for shape in &scene.shapes {
        let _ = match shape {
            Shape::Line { from, to, color, width } => writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"{width}\"/>",
                from.0,
                from.1,
                to.0,
                to.1,
                color.hex()
            ),
            Shape::Circle { center, radius, fill, stroke, stroke_width } => writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{radius}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"{stroke_width}\"/>",
                center.0,
                center.1,
                fill.hex(),
                stroke.hex()
            ),
            Shape::Rect { origin, size, fill } => writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                origin.0,
                origin.1,
                size.0,
                size.1,
                fill.hex()
            ),
            Shape::Text { position, size, color, anchor, text } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                // Monospace, stretched to the same advance as the bitmap font so labels
                // are placed identically in the SVG and the PNG.
                let length = glyph_advance(*size) * text.chars().count() as f64;
                writeln!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" \
                     font-size=\"{:.1}\" fill=\"{}\" text-anchor=\"{anchor}\" textLength=\"{length:.1}\" \
                     lengthAdjust=\"spacingAndGlyphs\">{}</text>",
                    position.0,
                    position.1 + size * 0.85,
                    size * 1.1,
                    color.hex(),
                    escape(text)
                )
            }
        };
    }
    out.push_str("</svg>\n");
    out
}
