//! The report as a picture (PNG and SVG): per mode, each kernel's median off vs on (p10–p90
//! whiskers); then the chain total and the graph span per mode. \[seq-batch\] A report with
//! steps of several batch sizes also gets the batch figure ([`draw_batch`]): µs per layer step
//! against n_s, one panel per T, beside the memory floor and the peers. Text uses the DejaVu
//! Sans font shipped by the `dejavu` crate (no system fonts, no fontconfig).

use super::report::{COPY_BYTES_PER_S, ModeReport, PEERS, Report, floor_us};
use super::stats::Summary;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

const OFF: RGBColor = RGBColor(0x4C, 0x72, 0xB0);
const ON: RGBColor = RGBColor(0xDD, 0x84, 0x52);
pub const SIZE: (u32, u32) = (1500, 1350);

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is valid TrueType shipped inside the dejavu crate; a failure leaves text out.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Short x-axis name of a row key (`GET_ROWS#1` → `get#1`).
pub fn short_name(key: &str) -> String {
    let (op, n) = key.split_once('#').unwrap_or((key, "0"));
    let short = match op {
        "GET_ROWS" => "get",
        "CONCAT" => "cat",
        "CPY_SNAPSHOTS" => "snap",
        "CPY" => "cpy",
        "SSM_CONV" => "conv",
        "L2_NORM" => "l2",
        "MUL_MAT_VEC" => "mmv",
        "MUL_MAT_VEC_PAIR" => "pair",
        "MUL_MAT_VEC_PAIR_GATE" => "pair+gate",
        "GATED_DELTA_NET_FROM_CACHE" => "gdn+read",
        "GDN_LAYER_STEP" => "step",
        "GDN_LAYER_STEP_REPLAY" => "rstep",
        "UNARY_MUL" => "splus·mul",
        "GDN_CONV_CHAIN" => "chain",
        "SIGMOID" => "sigm",
        "SOFTPLUS" => "splus",
        "ADD" => "add",
        "MUL" => "mul",
        "SCALE" => "zero",
        "GATED_DELTA_NET" => "gdn",
        other => {
            return format!(
                "{}{}",
                other.to_ascii_lowercase().chars().take(6).collect::<String>(),
                if n == "0" { String::new() } else { format!("#{n}") }
            );
        }
    };
    if n == "0" { short.to_string() } else { format!("{short}#{n}") }
}

type Bars = Vec<(String, Option<Summary>, Option<Summary>)>;

fn panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, bars: &Bars, y_label: &str) -> Result<(), String> {
    let y_max = bars.iter().flat_map(|(_, a, b)| [a, b]).flatten().map(|s| s.p90.max(s.median)).fold(0.0f64, f64::max).max(1e-3) * 1.15;
    let n = bars.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    let names: Vec<String> = bars.iter().map(|(k, _, _)| k.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 { names.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
        })
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (arm, color, dx) in [(0, OFF, -0.2f64), (1, ON, 0.2)] {
        let stats: Vec<(usize, Summary)> =
            bars.iter().enumerate().filter_map(|(i, (_, a, b))| if arm == 0 { a.map(|s| (i, s)) } else { b.map(|s| (i, s)) }).collect();
        let series = chart
            .draw_series(stats.iter().map(|(i, s)| {
                let x = *i as f64 + dx;
                Rectangle::new([(x - 0.18, 0.0), (x + 0.18, s.median)], color.filled())
            }))
            .map_err(|e| e.to_string())?;
        series
            .label(if arm == 0 { "off" } else { "on" })
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(stats.iter().map(|(i, s)| {
                let x = *i as f64 + dx;
                PathElement::new(vec![(x, s.p10), (x, s.p90)], BLACK.stroke_width(1))
            }))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The largest duration a figure draws, µs (over eleven days: no measured kernel, chain or
/// forward comes near it).
pub const MAX_US: f64 = 1e12;

/// \[validation\] Whether the figures can draw `r`: every duration (each kernel's, chain
/// total's and graph span's median, quantiles, extremes and mean) finite and in 0 ..= [`MAX_US`],
/// and every batch size at least 1. A report read back with `--plot-from` can hold anything:
/// plotters panics on coordinates past i32 (a duration of −10^300) and never returns from an
/// axis whose range is infinite (10^308 · 1.15), and log2 of n_s = 0 is −∞ (an overflowing
/// label count).
pub fn check_drawable(r: &Report) -> Result<(), String> {
    for m in &r.modes {
        if m.seqs == 0 {
            return Err(format!("mode {}: n_s = 0 sequences (a batch size is at least 1)", m.mode));
        }
        let kernels = m.kernels.iter().flat_map(|k| [(k.key.as_str(), k.off), (k.key.as_str(), k.on)]);
        let arms = [
            ("chain total", m.off.chain_total),
            ("chain total", m.on.chain_total),
            ("graph span", m.off.graph_span),
            ("graph span", m.on.graph_span),
        ];
        for (what, s) in kernels.chain(arms) {
            let Some(s) = s else { continue };
            if let Some(x) = [s.median, s.p10, s.p90, s.min, s.max, s.mean].into_iter().find(|x| !(0.0..=MAX_US).contains(x)) {
                return Err(format!("mode {}, {what}: {x:e} µs is no duration (0 ..= {MAX_US:e} µs)", m.mode));
            }
        }
    }
    Ok(())
}

/// Draws the whole figure on `root` (a report [`check_drawable`] refuses is an error).
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Result<(), String> {
    check_drawable(r)?;
    register_font();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "rgdn bench: {} on {} — {} timing{}",
        r.meta.preset,
        if r.meta.gpu.is_empty() { "?" } else { &r.meta.gpu },
        r.meta.timing,
        if r.meta.fusion_available { "" } else { " — FUSION NOT AVAILABLE (on = unfused again)" }
    );
    let root = root.titled(&title, ("sans-serif", 24)).map_err(|e| e.to_string())?;
    let panels = r.modes.len() + 2;
    let rows = panels.div_ceil(2);
    let areas = root.split_evenly((rows, 2));
    for (mode, area) in r.modes.iter().zip(&areas) {
        let bars: Bars = mode.kernels.iter().map(|k| (short_name(&k.key), k.off, k.on)).collect();
        panel(area, &format!("{} (T={}, R={}): kernel µs", mode.label, mode.tokens, mode.rollback), &bars, "µs")?;
    }
    let totals: Bars = r.modes.iter().map(|m| (format!("T={}", m.tokens), m.off.chain_total, m.on.chain_total)).collect();
    panel(&areas[r.modes.len()], "chain total per layer", &totals, "µs")?;
    let spans: Bars = r.modes.iter().map(|m| (format!("T={}", m.tokens), m.off.graph_span, m.on.graph_span)).collect();
    panel(&areas[r.modes.len() + 1], &format!("graph span, {} layers", r.meta.graph_layers), &spans, "µs")?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// \[seq-batch\] One line of the batch figure: its legend, colour, style and (n_s, µs) points.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchLine {
    pub label: String,
    pub color: RGBColor,
    pub style: LineStyle,
    pub points: Vec<(f64, f64)>,
}

/// \[seq-batch\] How a [`BatchLine`] is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStyle {
    /// A measured arm of this run: a solid line with dots.
    Measured,
    /// A floor (state bytes at [`COPY_BYTES_PER_S`]): dashed, no dots.
    Floor,
    /// A peer's figures from `peers-h200.md` (another run): a thin line with hollow dots.
    Peer,
}

const FLOOR: RGBColor = RGBColor(0x30, 0x30, 0x30);
const REPLAY: RGBColor = RGBColor(0x55, 0xA8, 0x68);
const PEER_COLORS: [(&str, RGBColor); 4] = [
    ("SGLang", RGBColor(0x81, 0x72, 0xB3)),
    ("vLLM", RGBColor(0xC4, 0x4E, 0x52)),
    ("FlashInfer", RGBColor(0x93, 0x78, 0x60)),
    ("fla*", RGBColor(0x8C, 0x8C, 0x8C)),
];

/// \[seq-batch\] µs per layer step of one arm: its graph span over the graph's layers (launch
/// gaps included, as the README's tables), or its chain total when the run had no graph.
fn per_layer_step(r: &Report, arm: &super::report::ArmStats) -> Option<f64> {
    match (arm.graph_span, r.meta.graph_layers) {
        (Some(span), layers) if layers > 0 => Some(span.median / layers as f64),
        _ => arm.chain_total.map(|c| c.median),
    }
}

/// \[seq-batch\] The batch figure's panels: for every T with steps of at least two batch sizes,
/// its lines over n_s — each arm of the run (the fused "on" and the unfused "off" arm; with
/// `--replay`, the snapshot and the replay arm), each arm's floor, and the peers at the n_s
/// the run covers. Empty when no T has two batch sizes.
pub fn batch_panels(r: &Report) -> Vec<(usize, Vec<BatchLine>)> {
    let mut tokens: Vec<usize> = r.modes.iter().map(|m| m.tokens).collect();
    tokens.sort_unstable();
    tokens.dedup();
    let mut panels = Vec::new();
    for t in tokens {
        let mut modes: Vec<&ModeReport> = r.modes.iter().filter(|m| m.tokens == t).collect();
        modes.sort_by_key(|m| m.seqs);
        let mut seqs: Vec<usize> = modes.iter().map(|m| m.seqs).collect();
        seqs.dedup();
        if seqs.len() < 2 {
            continue;
        }
        let mut lines = Vec::new();
        let mut line = |label: String, color: RGBColor, style: LineStyle, points: Vec<(f64, f64)>| {
            if !points.is_empty() {
                lines.push(BatchLine { label, color, style, points });
            }
        };
        let at = |m: &&ModeReport, y: Option<f64>| y.map(|y| (m.seqs as f64, y));
        // Snapshot-mode steps (off = fusions off, on = the fused step) and replay-mode ones
        // (off = the snapshot step, on = the replay step) are different arms: separate lines.
        for replay in [false, true] {
            let ms: Vec<&&ModeReport> = modes.iter().filter(|m| m.replay.is_some() == replay).collect();
            if ms.is_empty() {
                continue;
            }
            let (off_label, on_label) = if replay {
                let a = ms[0].replay.map_or(0, |x| x.accepted);
                ("snapshots".to_string(), format!("replay (a = {a})"))
            } else {
                ("rgdn, fusions off".to_string(), "rgdn, fusions on".to_string())
            };
            line(
                on_label,
                if replay { REPLAY } else { ON },
                LineStyle::Measured,
                ms.iter().filter_map(|m| at(m, per_layer_step(r, &m.on))).collect(),
            );
            line(off_label, OFF, LineStyle::Measured, ms.iter().filter_map(|m| at(m, per_layer_step(r, &m.off))).collect());
            let floor = if replay { "snapshot floor" } else { "floor" };
            line(floor.into(), FLOOR, LineStyle::Floor, ms.iter().filter_map(|m| at(m, floor_us(m))).collect());
            if replay {
                let rep = |m: &&&ModeReport| m.replay.map(|x| (m.seqs as f64, x.state_bytes as f64 / COPY_BYTES_PER_S * 1e6));
                line("replay floor".into(), REPLAY, LineStyle::Floor, ms.iter().filter_map(rep).collect());
            }
        }
        for (peer, color) in PEER_COLORS {
            let points = PEERS
                .iter()
                .filter(|(n, tt, _)| *tt == t && seqs.contains(n))
                .filter_map(|(n, _, ps)| ps.iter().find(|(name, _)| *name == peer).map(|&(_, us)| (*n as f64, us)))
                .collect();
            line(format!("{peer} (peers-h200.md)"), color, LineStyle::Peer, points);
        }
        panels.push((t, lines));
    }
    panels
}

/// \[seq-batch\] Draws the batch figure on `root`: one log-log panel per T of
/// [`batch_panels`] (µs per layer step against n_s). An error when there is no panel, or when
/// [`check_drawable`] refuses the report.
pub fn draw_batch<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Result<(), String> {
    check_drawable(r)?;
    let panels = batch_panels(r);
    if panels.is_empty() {
        return Err("no verify shape was run at two batch sizes".into());
    }
    register_font();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "rgdn bench: µs per layer step against sequences per step — {} on {}, commit {}",
        r.meta.preset,
        if r.meta.gpu.is_empty() { "?" } else { &r.meta.gpu },
        r.meta.commit.split_whitespace().next().unwrap_or("?")
    );
    let root = root.titled(&title, ("sans-serif", 22)).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((panels.len().div_ceil(2), 2));
    for ((t, lines), area) in panels.iter().zip(&areas) {
        // x is log2(n_s) on a linear axis, so that the ticks fall on the powers of two.
        let lines: Vec<BatchLine> =
            lines.iter().map(|l| BatchLine { points: l.points.iter().map(|&(x, y)| (x.log2(), y)).collect(), ..l.clone() }).collect();
        let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
        let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (y0, y1) = ys.fold((f64::MAX, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
        let mut chart = ChartBuilder::on(area)
            .caption(format!("T = {t}: µs per layer step"), ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(x0 - 0.3..x1 + 0.3, (y0.max(1e-3) / 1.3..y1 * 1.3).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("sequences per step (n_s)")
            .y_desc("µs")
            .x_labels(((x1 - x0).round() as usize + 1).max(2))
            .x_label_formatter(&|x| if (x - x.round()).abs() < 1e-6 { format!("{}", 2f64.powf(x.round())) } else { String::new() })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .light_line_style(WHITE)
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| e.to_string())?;
        for l in &lines {
            let color = l.color;
            let series = match l.style {
                LineStyle::Measured => {
                    chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|e| e.to_string())?;
                    chart.draw_series(LineSeries::new(l.points.clone(), color.stroke_width(2))).map_err(|e| e.to_string())?
                }
                LineStyle::Floor => {
                    chart.draw_series(DashedLineSeries::new(l.points.clone(), 8, 5, color.stroke_width(2))).map_err(|e| e.to_string())?
                }
                LineStyle::Peer => {
                    chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 4, color.stroke_width(2)))).map_err(|e| e.to_string())?;
                    chart.draw_series(LineSeries::new(l.points.clone(), color.stroke_width(1))).map_err(|e| e.to_string())?
                }
            };
            series.label(l.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// \[seq-batch\] The batch figure's size: two panels a row.
pub fn batch_size(r: &Report) -> (u32, u32) {
    (1500, 520 * batch_panels(r).len().div_ceil(2).max(1) as u32)
}

/// \[seq-batch\] Writes the batch figure as PNG ([`draw_batch`]).
pub fn write_batch_png(path: &Path, r: &Report) -> Result<(), String> {
    let root = BitMapBackend::new(path, batch_size(r)).into_drawing_area();
    draw_batch(&root, r)
}

/// \[seq-batch\] Writes the batch figure as SVG ([`draw_batch`]).
pub fn write_batch_svg(path: &Path, r: &Report) -> Result<(), String> {
    let root = SVGBackend::new(path, batch_size(r)).into_drawing_area();
    draw_batch(&root, r)
}

pub fn write_png(path: &Path, r: &Report) -> Result<(), String> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, r)
}

pub fn write_svg(path: &Path, r: &Report) -> Result<(), String> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    draw(&root, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;

    type KernelRowLike = crate::bench::report::KernelRow;

    trait Scaled {
        fn scaled(self, k: f64) -> Self;
    }

    impl Scaled for KernelRowLike {
        fn scaled(mut self, k: f64) -> Self {
            for s in [&mut self.off, &mut self.on].into_iter().flatten() {
                s.median *= k;
                s.p10 *= k;
                s.p90 *= k;
            }
            self
        }
    }

    /// [seq-batch] A synthetic report's modes at n_s = 1, 4 and 16 (each arm's time × n_s), with
    /// the state bytes of each batch.
    fn synthetic_batch(replay: bool) -> Report {
        let mut r = synthetic(true);
        let singles = r.modes.clone();
        for n_s in [4usize, 16] {
            for m in &singles {
                let mut m = m.clone();
                m.seqs = n_s;
                m.mode = format!("{}-s{n_s}", m.mode);
                m.state_bytes = m.state_bytes.map(|b| b * n_s as u64);
                for arm in [&mut m.off, &mut m.on] {
                    for s in [&mut arm.graph_span, &mut arm.chain_total].into_iter().flatten() {
                        s.median *= n_s as f64;
                    }
                }
                r.modes.push(m);
            }
        }
        if replay {
            for m in &mut r.modes {
                let state_bytes = (m.seqs as u64 * 2) << 21;
                m.replay = Some(crate::bench::report::ReplayArm {
                    accepted: m.tokens / 2,
                    state_bytes,
                    memory_per_seq: 3 << 20,
                    snapshot_memory_per_seq: 8 << 20,
                });
            }
        }
        r
    }

    #[test]
    fn the_batch_figure_has_a_panel_per_t_with_the_arms_the_floor_and_the_peers() {
        let r = synthetic_batch(false);
        let panels = batch_panels(&r);
        assert_eq!(panels.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 4, 8, 16]);
        let (_, t4) = &panels[1];
        let labels: Vec<&str> = t4.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "rgdn, fusions on",
                "rgdn, fusions off",
                "floor",
                "SGLang (peers-h200.md)",
                "vLLM (peers-h200.md)",
                "FlashInfer (peers-h200.md)",
                "fla* (peers-h200.md)"
            ]
        );
        // The "on" arm per layer step: its graph span over the graph's layers, at each n_s.
        let on = &t4[0].points;
        let mode = |n_s: usize| r.modes.iter().find(|m| m.tokens == 4 && m.seqs == n_s).unwrap();
        let expect: Vec<(f64, f64)> =
            [1, 4, 16].iter().map(|&n| (n as f64, mode(n).on.graph_span.unwrap().median / r.meta.graph_layers as f64)).collect();
        assert_eq!(on, &expect);
        assert_eq!(t4[2].points, [1, 4, 16].map(|n| (n as f64, floor_us(mode(n)).unwrap())));
        // The peers at the run's n_s only (peers-h200.md has n_s = 64 too).
        assert_eq!(t4[4].points, [(1.0, 12.73), (4.0, 18.13), (16.0, 62.25)]);
        // Replay runs: snapshot and replay arms, each with its floor.
        let r = synthetic_batch(true);
        let labels: Vec<String> = batch_panels(&r)[1].1.iter().map(|l| l.label.clone()).take(4).collect();
        assert_eq!(labels, ["replay (a = 2)", "snapshots", "snapshot floor", "replay floor"]);
        // One batch size: no panel, and the figure says why instead of drawing nothing.
        let single = synthetic(true);
        assert!(batch_panels(&single).is_empty());
        let dir = std::env::temp_dir().join(format!("rgdn-batch-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(write_batch_png(&dir.join("none.png"), &single).is_err());
        for replay in [false, true] {
            let png = dir.join(format!("batch-{replay}.png"));
            write_batch_png(&png, &synthetic_batch(replay)).unwrap();
            assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
            let svg = dir.join(format!("batch-{replay}.svg"));
            write_batch_svg(&svg, &synthetic_batch(replay)).unwrap();
            let text = std::fs::read_to_string(&svg).unwrap();
            assert!(text.contains("T = 16") && text.contains("floor"), "SVG lacks its text");
        }
        if std::env::var_os("RGDN_KEEP_PLOTS").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            println!("plots kept in {}", dir.display());
        }
    }

    #[test]
    fn short_names() {
        assert_eq!(short_name("GET_ROWS#1"), "get#1");
        assert_eq!(short_name("GATED_DELTA_NET#0"), "gdn");
        assert_eq!(short_name("SOMETHING_NEW#2"), "someth#2");
    }

    #[test]
    fn png_and_svg_render_from_synthetic_data() {
        let dir = std::env::temp_dir().join(format!("rgdn-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for fusion in [false, true] {
            let r = synthetic(fusion);
            let png = dir.join(format!("bench-{fusion}.png"));
            let svg = dir.join(format!("bench-{fusion}.svg"));
            write_png(&png, &r).unwrap();
            write_svg(&svg, &r).unwrap();
            let bytes = std::fs::read(&png).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            let text = std::fs::read_to_string(&svg).unwrap();
            assert!(text.contains("<svg") && text.contains("graph span"), "SVG lacks its text");
        }
        // The real chain's rows (T = 16: 18 kernels, the widest panel) keep their labels apart.
        let mut r = synthetic(false);
        let cfg = crate::bench::chain::ChainConfig {
            shape: crate::layer::GdnShape::QWEN35_4B,
            step: crate::layer::Step::new(16, 15),
            init: crate::layer::LayerInit::default(),
        };
        let built = crate::bench::chain::ChainPair::new(&crate::bench::chain::UnfusedOnly, &cfg, 1).unwrap();
        let template = r.modes[3].kernels[0].clone();
        r.modes[3].kernels = crate::bench::chain::op_keys(&built.off)
            .into_iter()
            .enumerate()
            .map(|(i, (key, _))| KernelRowLike { key, ..template.clone() }.scaled(1.0 + i as f64 / 4.0))
            .collect();
        write_png(&dir.join("bench-full.png"), &r).unwrap();
        if std::env::var_os("RGDN_KEEP_PLOTS").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            println!("plots kept in {}", dir.display());
        }
    }
}
