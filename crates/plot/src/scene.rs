//! A tiny 2-D scene (lines, circles, rectangles, text) that renders to SVG and to pixels,
//! so the SVG and the PNG plot are the same drawing.

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    pub const WHITE: Rgb = Rgb(255, 255, 255);
    pub const BLACK: Rgb = Rgb(0, 0, 0);
    pub const GREY: Rgb = Rgb(150, 150, 150);
    pub const LIGHT_GREY: Rgb = Rgb(225, 225, 225);

    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }

    /// Linear blend: `t` = 0 gives `self`, 1 gives `other`.
    pub fn mix(self, other: Rgb, t: f64) -> Rgb {
        let t = t.clamp(0.0, 1.0);
        let channel = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
        Rgb(
            channel(self.0, other.0),
            channel(self.1, other.1),
            channel(self.2, other.2),
        )
    }
}

/// Horizontal text alignment relative to `x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Line {
        from: (f64, f64),
        to: (f64, f64),
        color: Rgb,
        width: f64,
    },
    Circle {
        center: (f64, f64),
        radius: f64,
        fill: Rgb,
        stroke: Rgb,
        stroke_width: f64,
    },
    Rect {
        origin: (f64, f64),
        size: (f64, f64),
        fill: Rgb,
    },
    /// `position` is the left/centre/right end of the text's baseline box top.
    Text {
        position: (f64, f64),
        size: f64,
        color: Rgb,
        anchor: Anchor,
        text: String,
    },
}

/// Everything drawn, in painting order.
#[derive(Clone, Debug, PartialEq)]
pub struct Scene {
    pub width: u32,
    pub height: u32,
    pub background: Rgb,
    pub shapes: Vec<Shape>,
}

impl Scene {
    pub fn new(width: u32, height: u32) -> Self {
        Scene {
            width,
            height,
            background: Rgb::WHITE,
            shapes: Vec::new(),
        }
    }

    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), color: Rgb, width: f64) {
        self.shapes.push(Shape::Line {
            from,
            to,
            color,
            width,
        });
    }

    pub fn circle(
        &mut self,
        center: (f64, f64),
        radius: f64,
        fill: Rgb,
        stroke: Rgb,
        stroke_width: f64,
    ) {
        self.shapes.push(Shape::Circle {
            center,
            radius,
            fill,
            stroke,
            stroke_width,
        });
    }

    pub fn rect(&mut self, origin: (f64, f64), size: (f64, f64), fill: Rgb) {
        self.shapes.push(Shape::Rect { origin, size, fill });
    }

    /// Text whose top edge is at `position.1`, `size` pixels tall.
    pub fn text(
        &mut self,
        position: (f64, f64),
        size: f64,
        color: Rgb,
        anchor: Anchor,
        text: &str,
    ) {
        self.shapes.push(Shape::Text {
            position,
            size,
            color,
            anchor,
            text: text.to_string(),
        });
    }
}

/// Width of `text` at `size` in the monospace metrics both renderers use (one glyph cell
/// of `size` × `size` per character, as the 8×8 bitmap font scaled up).
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * glyph_advance(size)
}

/// Horizontal advance of one character.
pub fn glyph_advance(size: f64) -> f64 {
    size
}
