//! Grouped horizontal bar chart (the bench lab's studies): one group per category (a job, a
//! layout), one bar per series (a policy, a published figure), values on a linear or
//! logarithmic axis.
//!
//! ```text
//!   title
//!   subtitle
//!            0        100       200      ← value axis (ticks, grid)
//!   job 1   ███████████                  ← series 0
//!           ██████████████               ← series 1
//!   job 2   ████████
//!           ███████████████████
//!   legend: ■ series 0  ■ series 1
//! ```

use crate::scene::{text_width, Anchor, Rgb, Scene};

const WIDTH: u32 = 1300;
const MARGIN: f64 = 30.0;
const TOP: f64 = 110.0;
const BAR: f64 = 9.0;
const GROUP_GAP: f64 = 10.0;
const LABEL_SIZE: f64 = 12.0;
const AXIS_SIZE: f64 = 11.0;

/// Colours for series, in order (ColorBrewer "Set1"/"Dark2"-like, distinct on white).
pub const PALETTE: [Rgb; 8] = [
    Rgb(55, 126, 184),
    Rgb(228, 26, 28),
    Rgb(77, 175, 74),
    Rgb(152, 78, 163),
    Rgb(255, 127, 0),
    Rgb(166, 86, 40),
    Rgb(247, 129, 191),
    Rgb(120, 120, 120),
];

/// What to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub subtitle: String,
    /// The value axis' name (`IOPS`, `MB/s`).
    pub unit: String,
    /// Logarithmic value axis (for values spanning decades).
    pub log: bool,
    /// Series names and colours, in bar order.
    pub series: Vec<(String, Rgb)>,
    pub groups: Vec<BarGroup>,
}

/// One category: its label and a value per series (None: no bar).
#[derive(Clone, Debug, PartialEq)]
pub struct BarGroup {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// The value axis: maps values to x pixels.
struct Axis {
    left: f64,
    right: f64,
    min: f64,
    max: f64,
    log: bool,
}

impl Axis {
    fn fit(chart: &BarChart, left: f64) -> Axis {
        let values = chart
            .groups
            .iter()
            .flat_map(|g| g.values.iter().flatten())
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let hi = if hi > 0.0 { hi } else { 1.0 };
        let (min, max) = if chart.log {
            let lo = if lo.is_finite() { lo } else { hi / 10.0 };
            (
                10f64.powf(lo.log10().floor()),
                10f64.powf(hi.log10().ceil()),
            )
        } else {
            let step = crate::tick_step(hi);
            (0.0, (hi / step).ceil() * step)
        };
        Axis {
            left,
            right: f64::from(WIDTH) - MARGIN - 20.0,
            min,
            max: max.max(min * 10.0).max(min + 1e-9),
            log: chart.log,
        }
    }

    fn x(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.max(self.min).log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        self.left + t.clamp(0.0, 1.0) * (self.right - self.left)
    }

    /// Tick values: powers of ten (log), or round steps (linear).
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.min.log10().round() as i32,
                self.max.log10().round() as i32,
            );
            return (a..=b).map(|e| 10f64.powi(e)).collect();
        }
        let step = crate::tick_step(self.max - self.min);
        (0..)
            .map(|i| self.min + step * f64::from(i))
            .take_while(|v| *v <= self.max + step * 1e-6)
            .collect()
    }
}

/// Tick text: `1.5k`, `20M`, `0.5`.
fn tick_label(v: f64) -> String {
    let (scaled, suffix) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    let text = format!("{scaled:.1}");
    format!(
        "{}{suffix}",
        text.trim_end_matches('0').trim_end_matches('.')
    )
}

/// The chart as a scene.
pub fn scene(chart: &BarChart) -> Scene {
    let n = chart.series.len().max(1) as f64;
    let group_height = n * BAR + GROUP_GAP;
    let plot_height = group_height * chart.groups.len() as f64;
    let legend_rows = chart.series.len().div_ceil(4) as f64;
    let height = TOP + plot_height + 40.0 + legend_rows * 22.0 + MARGIN;
    let mut scene = Scene::new(WIDTH, height.ceil() as u32);
    let label_width = chart
        .groups
        .iter()
        .map(|g| text_width(&g.label, LABEL_SIZE))
        .fold(0.0, f64::max);
    let axis = Axis::fit(chart, MARGIN + label_width + 12.0);
    scene.text(
        (MARGIN, 16.0),
        16.0,
        Rgb::BLACK,
        Anchor::Start,
        &chart.title,
    );
    let grey = Rgb(60, 60, 60);
    scene.text(
        (MARGIN, 44.0),
        AXIS_SIZE,
        grey,
        Anchor::Start,
        &chart.subtitle,
    );
    draw_axis(&mut scene, &axis, chart, TOP + plot_height);
    for (i, group) in chart.groups.iter().enumerate() {
        let top = TOP + group_height * i as f64;
        let mid = top + (n * BAR) / 2.0 - LABEL_SIZE / 2.0;
        scene.text(
            (axis.left - 8.0, mid),
            LABEL_SIZE,
            Rgb::BLACK,
            Anchor::End,
            &group.label,
        );
        for (k, value) in group.values.iter().enumerate() {
            let (Some(v), Some((_, color))) = (value, chart.series.get(k)) else {
                continue;
            };
            let y = top + BAR * k as f64;
            let width = (axis.x(*v) - axis.left).max(1.0);
            scene.rect((axis.left, y), (width, BAR - 1.0), *color);
        }
    }
    draw_legend(&mut scene, chart, TOP + plot_height + 36.0);
    scene
}

fn draw_axis(scene: &mut Scene, axis: &Axis, chart: &BarChart, bottom: f64) {
    for t in axis.ticks() {
        let x = axis.x(t);
        scene.line((x, TOP - 6.0), (x, bottom), Rgb::LIGHT_GREY, 1.0);
        scene.text(
            (x, TOP - 22.0),
            AXIS_SIZE,
            Rgb::GREY,
            Anchor::Middle,
            &tick_label(t),
        );
    }
    scene.line((axis.left, TOP - 6.0), (axis.left, bottom), Rgb::BLACK, 1.0);
    let unit = if chart.log {
        format!("{} (log scale)", chart.unit)
    } else {
        chart.unit.clone()
    };
    scene.text(
        (axis.right, 72.0),
        LABEL_SIZE,
        Rgb::BLACK,
        Anchor::End,
        &unit,
    );
}

fn draw_legend(scene: &mut Scene, chart: &BarChart, top: f64) {
    let column = (f64::from(WIDTH) - 2.0 * MARGIN) / 4.0;
    for (i, (name, color)) in chart.series.iter().enumerate() {
        let x = MARGIN + column * (i % 4) as f64;
        let y = top + 22.0 * (i / 4) as f64;
        scene.rect((x, y), (14.0, 12.0), *color);
        scene.text((x + 20.0, y), LABEL_SIZE, Rgb::BLACK, Anchor::Start, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::Shape;

    fn chart(log: bool) -> BarChart {
        BarChart {
            title: "t".into(),
            subtitle: "s".into(),
            unit: "IOPS".into(),
            log,
            series: vec![("a".into(), PALETTE[0]), ("b".into(), PALETTE[1])],
            groups: vec![
                BarGroup {
                    label: "job 1".into(),
                    values: vec![Some(100.0), Some(50.0)],
                },
                BarGroup {
                    label: "job 2".into(),
                    values: vec![Some(20_000.0), None],
                },
            ],
        }
    }

    fn bars(scene: &Scene) -> Vec<f64> {
        scene
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Rect { size, fill, .. } if *fill != Rgb::WHITE && size.1 < BAR => {
                    Some(size.0)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn bars_are_as_long_as_their_values_and_missing_ones_are_not_drawn() {
        let linear = bars(&scene(&chart(false)));
        assert_eq!(linear.len(), 3);
        // Linear: 100 is twice 50 (both from the axis' zero).
        assert!((linear[0] / linear[1] - 2.0).abs() < 0.05, "{linear:?}");
        let log = bars(&scene(&chart(true)));
        // Log from 10 to 100k: 100 is one decade, 20k a bit over three.
        assert!(log[2] > 3.0 * log[0] && log[2] < 3.5 * log[0], "{log:?}");
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(1500.0), "1.5k");
        assert_eq!(tick_label(20e6), "20M");
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(100.0), "100");
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let empty = BarChart {
            groups: Vec::new(),
            ..chart(true)
        };
        assert!(crate::to_svg(&scene(&empty)).starts_with("<svg"));
        assert!(!crate::to_png(&scene(&empty)).is_empty());
    }
}
