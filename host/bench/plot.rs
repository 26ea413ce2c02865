//! The report as a picture (PNG and SVG): per mode, each kernel's median off vs on (p10–p90
//! whiskers); then the chain total and the graph span per mode. Text uses the DejaVu Sans
//! font shipped by the `dejavu` crate (no system fonts, no fontconfig).

use super::report::Report;
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

/// Draws the whole figure on `root`.
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> Result<(), String> {
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
