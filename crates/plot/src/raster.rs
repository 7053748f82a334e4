//! Scene → RGB pixels, with the public-domain 8×8 bitmap font (crate `font8x8`) scaled to
//! the text size.

use crate::scene::{glyph_advance, text_width, Anchor, Rgb, Scene, Shape};

/// An RGB image, row-major.
pub struct Canvas {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: u32, height: u32, background: Rgb) -> Self {
        let pixels =
            [background.0, background.1, background.2].repeat(width as usize * height as usize);
        Canvas {
            width,
            height,
            pixels,
        }
    }

    /// Blends `color` into pixel (x, y) with coverage `alpha` (0..1); outside is ignored.
    fn blend(&mut self, x: i64, y: i64, color: Rgb, alpha: f64) {
        if x < 0 || y < 0 || x >= self.width as i64 || y >= self.height as i64 || alpha <= 0.0 {
            return;
        }
        let index = (y as usize * self.width as usize + x as usize) * 3;
        let current = Rgb(
            self.pixels[index],
            self.pixels[index + 1],
            self.pixels[index + 2],
        );
        let mixed = current.mix(color, alpha);
        self.pixels[index..index + 3].copy_from_slice(&[mixed.0, mixed.1, mixed.2]);
    }

    fn fill_rect(&mut self, origin: (f64, f64), size: (f64, f64), color: Rgb) {
        let (x0, y0) = (origin.0.round() as i64, origin.1.round() as i64);
        let (x1, y1) = (
            (origin.0 + size.0).round() as i64,
            (origin.1 + size.1).round() as i64,
        );
        for y in y0..y1 {
            for x in x0..x1 {
                self.blend(x, y, color, 1.0);
            }
        }
    }

    /// Anti-aliased disc (coverage from the distance to the edge).
    fn fill_disc(&mut self, center: (f64, f64), radius: f64, color: Rgb) {
        let reach = radius.ceil() as i64 + 1;
        let (cx, cy) = (center.0.floor() as i64, center.1.floor() as i64);
        for y in cy - reach..=cy + reach {
            for x in cx - reach..=cx + reach {
                let dx = x as f64 + 0.5 - center.0;
                let dy = y as f64 + 0.5 - center.1;
                let coverage = radius + 0.5 - (dx * dx + dy * dy).sqrt();
                self.blend(x, y, color, coverage.min(1.0));
            }
        }
    }

    /// Anti-aliased thick line (distance to the segment).
    fn draw_line(&mut self, from: (f64, f64), to: (f64, f64), color: Rgb, width: f64) {
        let half = width / 2.0;
        let (min_x, max_x) = (from.0.min(to.0) - half - 1.0, from.0.max(to.0) + half + 1.0);
        let (min_y, max_y) = (from.1.min(to.1) - half - 1.0, from.1.max(to.1) + half + 1.0);
        let (dx, dy) = (to.0 - from.0, to.1 - from.1);
        let length_sq = (dx * dx + dy * dy).max(1e-12);
        for y in min_y.floor() as i64..=max_y.ceil() as i64 {
            for x in min_x.floor() as i64..=max_x.ceil() as i64 {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                let t = (((px - from.0) * dx + (py - from.1) * dy) / length_sq).clamp(0.0, 1.0);
                let (qx, qy) = (from.0 + t * dx, from.1 + t * dy);
                let distance = ((px - qx).powi(2) + (py - qy).powi(2)).sqrt();
                self.blend(x, y, color, (half + 0.5 - distance).min(1.0));
            }
        }
    }

    /// Text with the 8×8 font, each glyph scaled to a `size` × `size` cell.
    fn draw_text(
        &mut self,
        position: (f64, f64),
        size: f64,
        color: Rgb,
        anchor: Anchor,
        text: &str,
    ) {
        let width = text_width(text, size);
        let left = match anchor {
            Anchor::Start => position.0,
            Anchor::Middle => position.0 - width / 2.0,
            Anchor::End => position.0 - width,
        };
        let cell = size.round().max(8.0) as i64;
        for (i, c) in text.chars().enumerate() {
            let glyph = glyph_rows(c);
            let x0 = (left + i as f64 * glyph_advance(size)).round() as i64;
            let y0 = position.1.round() as i64;
            for py in 0..cell {
                let row = glyph[(py * 8 / cell) as usize];
                for px in 0..cell {
                    if row & (1 << (px * 8 / cell)) != 0 {
                        self.blend(x0 + px, y0 + py, color, 1.0);
                    }
                }
            }
        }
    }
}

/// Rows of the 8×8 glyph for `c` (bit 0 = leftmost pixel); a few non-ASCII symbols the
/// plot uses are mapped to ASCII look-alikes.
fn glyph_rows(c: char) -> [u8; 8] {
    let c = match c {
        '×' => 'x',
        '≤' => '<',
        '—' | '–' => '-',
        '·' => '.',
        other => other,
    };
    let code = c as usize;
    if code < 128 {
        font8x8::legacy::BASIC_LEGACY[code]
    } else {
        font8x8::legacy::BASIC_LEGACY['?' as usize]
    }
}

/// Paints `scene` into a new canvas.
pub fn rasterize(scene: &Scene) -> Canvas {
    let mut canvas = Canvas::new(scene.width, scene.height, scene.background);
    for shape in &scene.shapes {
        match shape {
            Shape::Line {
                from,
                to,
                color,
                width,
            } => canvas.draw_line(*from, *to, *color, *width),
            Shape::Circle {
                center,
                radius,
                fill,
                stroke,
                stroke_width,
            } => {
                if *stroke_width > 0.0 {
                    canvas.fill_disc(*center, radius + stroke_width / 2.0, *stroke);
                    canvas.fill_disc(*center, radius - stroke_width / 2.0, *fill);
                } else {
                    canvas.fill_disc(*center, *radius, *fill);
                }
            }
            Shape::Rect { origin, size, fill } => canvas.fill_rect(*origin, *size, *fill),
            Shape::Text {
                position,
                size,
                color,
                anchor,
                text,
            } => canvas.draw_text(*position, *size, *color, *anchor, text),
        }
    }
    canvas
}
