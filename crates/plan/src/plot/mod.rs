//! The plot: usable capacity (x) against predicted speed (y), colour = risk of data loss,
//! black rings = Pareto front. One [`Scene`] rendered to SVG or PNG.

use std::path::Path;

use cairn_plot::scene::text_width;
use cairn_plot::{tick_step, Format};
pub use cairn_plot::{Anchor, Rgb, Scene};

use crate::enumerate::LayoutKind;
use crate::evaluate::{Evaluation, PlanContext};
use crate::PlanError;

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 900;
const LEFT: f64 = 100.0;
const RIGHT: f64 = 1040.0;
const TOP: f64 = 140.0;
const BOTTOM: f64 = 800.0;
const LABEL_SIZE: f64 = 16.0;
const POINT_RADIUS: f64 = 8.0;
/// Risk colour scale: P(loss) from 10^LOG_P_MIN (green) to 1 (red).
const LOG_P_MIN: f64 = -8.0;

/// Writes the plot to `path`, SVG or PNG by extension.
pub fn write_plot(
    path: &Path,
    context: &PlanContext,
    rows: &[Evaluation],
) -> Result<(), PlanError> {
    let format = Format::of(path).ok_or_else(|| PlanError::PlotFormat(path.to_path_buf()))?;
    let bytes = cairn_plot::render(&build_scene(context, rows), format);
    std::fs::write(path, bytes).map_err(|source| PlanError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// SVG text of the plot.
pub fn plot_svg(context: &PlanContext, rows: &[Evaluation]) -> String {
    cairn_plot::to_svg(&build_scene(context, rows))
}

/// PNG bytes of the plot.
pub fn plot_png(context: &PlanContext, rows: &[Evaluation]) -> Vec<u8> {
    cairn_plot::to_png(&build_scene(context, rows))
}

/// Colour of a probability of data loss: green (≤ 1e-8) → yellow → red (certain).
pub fn risk_color(p_loss: f64) -> Rgb {
    let green = Rgb(26, 150, 65);
    let yellow = Rgb(245, 190, 20);
    let red = Rgb(215, 25, 28);
    let t = (p_loss.max(1e-300).log10().clamp(LOG_P_MIN, 0.0) - LOG_P_MIN) / -LOG_P_MIN;
    if t < 0.5 {
        green.mix(yellow, t * 2.0)
    } else {
        yellow.mix(red, (t - 0.5) * 2.0)
    }
}

/// Compact point label: `z2-12` raidz2 of 12, `3×` three vdevs, `m2` 2-way mirror, `+1s`.
pub fn short_label(row: &Evaluation) -> String {
    let vdev = match row.kind {
        LayoutKind::Stripe => return format!("stripe-{}", row.groups),
        LayoutKind::Mirror => format!("m{}", row.width),
        LayoutKind::Raidz1 => format!("z1-{}", row.width),
        LayoutKind::Raidz2 => format!("z2-{}", row.width),
        LayoutKind::Raidz3 => format!("z3-{}", row.width),
    };
    let groups = if row.groups > 1 {
        format!("{}x", row.groups)
    } else {
        String::new()
    };
    let spares = if row.spares > 0 {
        format!("+{}s", row.spares)
    } else {
        String::new()
    };
    format!("{groups}{vdev}{spares}")
}

/// x: capacity in TiB, linear from a round value below the smallest; y: speed, logarithmic
/// (the layouts crowd at the slow end otherwise).
struct Axes {
    x_min: f64,
    x_max: f64,
    x_step: f64,
    y_min: f64,
    y_max: f64,
}

impl Axes {
    fn fit(rows: &[Evaluation]) -> Axes {
        let capacities = rows.iter().map(|r| tib(r.avail_bytes));
        let (low, high) = capacities.fold((f64::INFINITY, 0.0f64), |(lo, hi), c| {
            (lo.min(c), hi.max(c))
        });
        let x_step = tick_step((high - low * 0.9).max(1e-6));
        let x_min = ((low * 0.9) / x_step).floor() * x_step;
        let x_max = ((high * 1.04) / x_step).ceil().max(1.0) * x_step;
        let speeds = rows.iter().map(|r| r.perf_score);
        let (slow, fast) = speeds.fold((f64::INFINITY, 0.0f64), |(lo, hi), s| {
            (lo.min(s), hi.max(s))
        });
        Axes {
            x_min,
            x_max,
            x_step,
            y_min: (slow / 1.25).max(0.1),
            y_max: (fast * 1.25).max(1.0),
        }
    }

    fn to_pixels(&self, x: f64, y: f64) -> (f64, f64) {
        let x_fraction = (x - self.x_min) / (self.x_max - self.x_min).max(1e-9);
        let y_fraction = (y.max(1e-9) / self.y_min).ln() / (self.y_max / self.y_min).ln().max(1e-9);
        (
            LEFT + x_fraction * (RIGHT - LEFT),
            BOTTOM - y_fraction * (BOTTOM - TOP),
        )
    }

    /// 1-2-3-5 ticks inside the y range.
    fn y_ticks(&self) -> Vec<f64> {
        let mut ticks = Vec::new();
        let mut decade = 10f64.powf(self.y_min.log10().floor());
        while decade <= self.y_max {
            for m in [1.0, 2.0, 3.0, 5.0] {
                let value = m * decade;
                if value >= self.y_min && value <= self.y_max {
                    ticks.push(value);
                }
            }
            decade *= 10.0;
        }
        ticks
    }
}

fn tib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 40) as f64
}

/// Lays out the whole figure.
pub fn build_scene(context: &PlanContext, rows: &[Evaluation]) -> Scene {
    let mut scene = Scene::new(WIDTH, HEIGHT);
    if rows.is_empty() {
        return scene;
    }
    let axes = Axes::fit(rows);
    draw_titles(&mut scene, context);
    draw_axes(&mut scene, &axes);
    let recommended = crate::output::recommended(rows).map(|r| r.layout.clone());
    draw_points(&mut scene, &axes, rows, recommended.as_deref());
    draw_legend(&mut scene, context);
    scene
}

fn draw_titles(scene: &mut Scene, context: &PlanContext) {
    let disk = &context.disks[0];
    let title = format!("cairn plan: {} x {}", context.disks.len(), disk.name);
    scene.text((LEFT - 60.0, 16.0), 24.0, Rgb::BLACK, Anchor::Start, &title);
    let lines = [
        "usable capacity vs speed of every layout; colour = risk of data loss".to_string(),
        format!(
            "ZFS rules {}, ashift {}, risk over {} years incl. read errors during rebuilds",
            context.era, context.ashift, context.years
        ),
    ];
    for (i, line) in lines.iter().enumerate() {
        scene.text(
            (LEFT - 60.0, 52.0 + 22.0 * i as f64),
            LABEL_SIZE,
            Rgb(60, 60, 60),
            Anchor::Start,
            line,
        );
    }
}

/// Legend tick text for a probability: `100%`, `1%`, `0.01%`, `1e-6`.
fn legend_probability(exponent: i32) -> String {
    match exponent {
        0.. => "100%".to_string(),
        -4..=-1 => format!("{}%", 10f64.powi(exponent + 2)),
        _ => format!("1e{exponent}"),
    }
}

fn draw_axes(scene: &mut Scene, axes: &Axes) {
    let mut x = axes.x_min;
    while x <= axes.x_max + 1e-9 {
        let (px, _) = axes.to_pixels(x, axes.y_min);
        scene.line((px, TOP), (px, BOTTOM), Rgb::LIGHT_GREY, 1.0);
        let label = format!("{}", (x * 100.0).round() / 100.0);
        scene.text(
            (px, BOTTOM + 10.0),
            LABEL_SIZE,
            Rgb::BLACK,
            Anchor::Middle,
            &label,
        );
        x += axes.x_step;
    }
    for y in axes.y_ticks() {
        let (_, py) = axes.to_pixels(axes.x_min, y);
        scene.line((LEFT, py), (RIGHT, py), Rgb::LIGHT_GREY, 1.0);
        scene.text(
            (LEFT - 10.0, py - 8.0),
            LABEL_SIZE,
            Rgb::BLACK,
            Anchor::End,
            &format!("{y}"),
        );
    }
    scene.line((LEFT, BOTTOM), (RIGHT, BOTTOM), Rgb::BLACK, 2.0);
    scene.line((LEFT, TOP), (LEFT, BOTTOM), Rgb::BLACK, 2.0);
    let x_label = "usable capacity, TiB (zfs list AVAIL)";
    scene.text(
        ((LEFT + RIGHT) / 2.0, BOTTOM + 40.0),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::Middle,
        x_label,
    );
    let y_label = "speed, x one disk, log scale (geometric mean of seq R/W, random R/W)";
    scene.text(
        (LEFT - 60.0, TOP - 32.0),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::Start,
        y_label,
    );
}

type Box2 = (f64, f64, f64, f64);

fn overlaps(a: Box2, b: Box2) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

fn draw_points(scene: &mut Scene, axes: &Axes, rows: &[Evaluation], recommended: Option<&str>) {
    let centers: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| axes.to_pixels(tib(r.avail_bytes), r.perf_score))
        .collect();
    let mut taken: Vec<Box2> = centers
        .iter()
        .map(|c| {
            (
                c.0 - POINT_RADIUS,
                c.1 - POINT_RADIUS,
                c.0 + POINT_RADIUS,
                c.1 + POINT_RADIUS,
            )
        })
        .collect();
    // Dominated points first so the Pareto front is painted on top.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| rows[i].pareto);
    for &i in &order {
        let (stroke, width) = if rows[i].pareto {
            (Rgb::BLACK, 3.0)
        } else {
            (Rgb::GREY, 1.0)
        };
        scene.circle(
            centers[i],
            POINT_RADIUS,
            risk_color(rows[i].p_loss),
            stroke,
            width,
        );
    }
    // Labels: the recommended layout, then the Pareto front, then the rest, each at the
    // first free spot around its point.
    let is_recommended = |i: usize| Some(rows[i].layout.as_str()) == recommended;
    order.sort_by_key(|&i| (!is_recommended(i), !rows[i].pareto));
    for &i in &order {
        let mut label = short_label(&rows[i]);
        if is_recommended(i) {
            label.push_str(" (recommended)");
        }
        let width = text_width(&label, LABEL_SIZE);
        let (cx, cy) = centers[i];
        let candidates = [
            (cx + 12.0, cy - 8.0, Anchor::Start),
            (cx - 12.0, cy - 8.0, Anchor::End),
            (cx, cy - 30.0, Anchor::Middle),
            (cx, cy + 12.0, Anchor::Middle),
            (cx + 12.0, cy - 26.0, Anchor::Start),
            (cx + 12.0, cy + 10.0, Anchor::Start),
            (cx - 12.0, cy - 26.0, Anchor::End),
            (cx - 12.0, cy + 10.0, Anchor::End),
        ];
        let spot = candidates.iter().find_map(|&(x, y, anchor)| {
            let left = match anchor {
                Anchor::Start => x,
                Anchor::Middle => x - width / 2.0,
                Anchor::End => x - width,
            };
            let bounds = (left, y, left + width, y + LABEL_SIZE);
            let inside = bounds.0 >= LEFT
                && bounds.2 <= RIGHT + 60.0
                && bounds.1 >= TOP - 10.0
                && bounds.3 <= BOTTOM;
            (inside && !taken.iter().any(|&t| overlaps(t, bounds)))
                .then_some((x, y, anchor, bounds))
        });
        if let Some((x, y, anchor, bounds)) = spot {
            taken.push(bounds);
            let color = if rows[i].pareto {
                Rgb::BLACK
            } else {
                Rgb(110, 110, 110)
            };
            scene.text((x, y), LABEL_SIZE, color, anchor, &label);
        }
    }
}

fn draw_legend(scene: &mut Scene, context: &PlanContext) {
    let x = RIGHT + 70.0;
    scene.text(
        (x, TOP),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::Start,
        &format!("P(loss, {} y)", context.years),
    );
    let (bar_top, bar_height) = (TOP + 30.0, 300.0);
    let steps = 60;
    for step in 0..steps {
        let t = step as f64 / steps as f64;
        let p = 10f64.powf(t * LOG_P_MIN);
        let y = bar_top + t * bar_height;
        scene.rect(
            (x, y),
            (24.0, bar_height / steps as f64 + 0.5),
            risk_color(p),
        );
    }
    for exponent in [0, -2, -4, -6, -8] {
        let t = exponent as f64 / LOG_P_MIN;
        let y = bar_top + t * bar_height;
        scene.line((x + 24.0, y), (x + 32.0, y), Rgb::BLACK, 1.0);
        let label = legend_probability(exponent);
        scene.text(
            (x + 38.0, y - 8.0),
            LABEL_SIZE,
            Rgb::BLACK,
            Anchor::Start,
            &label,
        );
    }
    let key_top = bar_top + bar_height + 50.0;
    scene.circle(
        (x + 10.0, key_top + 8.0),
        POINT_RADIUS,
        Rgb::WHITE,
        Rgb::BLACK,
        3.0,
    );
    scene.text(
        (x + 28.0, key_top),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::Start,
        "Pareto front",
    );
    scene.circle(
        (x + 10.0, key_top + 38.0),
        POINT_RADIUS,
        Rgb::WHITE,
        Rgb::GREY,
        1.0,
    );
    scene.text(
        (x + 28.0, key_top + 30.0),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::Start,
        "dominated",
    );
    let key = [
        "labels:",
        "z2-12 raidz2 of 12",
        "m2    2-way mirror",
        "3x    3 vdevs",
        "+1s   1 hot spare",
    ];
    for (i, line) in key.iter().enumerate() {
        scene.text(
            (x - 40.0, key_top + 80.0 + i as f64 * 24.0),
            LABEL_SIZE,
            Rgb::BLACK,
            Anchor::Start,
            line,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(90.0), 20.0);
        let axes = Axes {
            x_min: 0.0,
            x_max: 10.0,
            x_step: 2.0,
            y_min: 3.5,
            y_max: 30.0,
        };
        assert_eq!(axes.y_ticks(), vec![5.0, 10.0, 20.0, 30.0]);
        assert_eq!(tick_step(26.0), 5.0);
        assert_eq!(tick_step(1.0), 0.2);
    }

    #[test]
    fn colours_run_green_to_red() {
        assert_eq!(risk_color(1e-9), Rgb(26, 150, 65));
        assert_eq!(risk_color(1.0), Rgb(215, 25, 28));
        assert_eq!(risk_color(1e-4), Rgb(245, 190, 20));
        assert_eq!(legend_probability(0), "100%");
        assert_eq!(legend_probability(-2), "1%");
        assert_eq!(legend_probability(-4), "0.01%");
        assert_eq!(legend_probability(-6), "1e-6");
    }
}
