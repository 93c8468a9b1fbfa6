//! Line and scatter charts written as SVG and PNG with `plotters`.
//!
//! One [`Chart`] gives both files from the same drawing code: SVG for documents (text stays text,
//! scales without blur) and PNG for places that show only images. Series get distinct colours
//! *and* marker shapes, so they stay apart in grey-scale prints and for colour-blind readers.
//!
//! Fonts: plotters lays out text (SVG too, to size labels) through a font it must be given. The
//! crate's default `ttf` feature would find system fonts through font-kit and fontconfig, which
//! needs `libfontconfig1-dev` to build and a font installed to run; instead DejaVu Sans is
//! compiled into the binary (the `dejavu` crate, about 0.7 MB linked) and registered with
//! plotters' small pure-Rust `ab_glyph` renderer. So PNG text works on any machine, with no apt
//! package and no fallible font search, and a chart renders the same on every machine.
//! The SVG names `sans-serif`, which the viewer's own font fills.
//!
//! Data that a chart cannot show is left out, never a panic: non-finite values, and on a log axis
//! values `<= 0`. The legend entry of such a series says how many points were left out, so a
//! partly empty curve is never mistaken for the whole data. A chart with no drawable point at all
//! still gets axes and says "no data".

use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::DynElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

/// Pixel size of both outputs; 16:10 fits a slide or a README column.
pub const SIZE: (u32, u32) = (1024, 640);

/// The family every text style names; the embedded font is registered under it.
const FONT: &str = "sans-serif";

/// Tableau 10: ten colours chosen to be told apart, with a dark enough yellow for white paper.
const COLOURS: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// Marker shapes cycle every four series; with the ten colours, the (colour, shape) pair stays
/// unique for lcm(10, 4) = 20 series.
const SHAPES: usize = 4;

/// One named curve (or point cloud). Points are drawn in the given order, so a line series should
/// be sorted by x by the caller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), points }
    }
}

/// A chart of several series sharing axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// Join each series' points with lines (a sweep curve); `false` draws markers only (a scatter,
    /// e.g. per-rank completion times, where neighbouring ranks are not a continuum).
    pub lines: bool,
    pub series: Vec<Series>,
}

impl Chart {
    /// A line chart on linear axes with no series yet.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            log_x: false,
            log_y: false,
            lines: true,
            series: Vec::new(),
        }
    }

    /// The per-rank completion chart: x = rank, y = time (`y_label` names the unit), markers only,
    /// one series per algorithm added with [`Chart::add`].
    pub fn per_rank(title: impl Into<String>, y_label: impl Into<String>) -> Self {
        Chart { lines: false, ..Chart::new(title, "rank", y_label) }
    }

    /// Adds a series; returns `&mut self` so calls chain.
    pub fn add(&mut self, name: impl Into<String>, points: Vec<(f64, f64)>) -> &mut Self {
        self.series.push(Series::new(name, points));
        self
    }

    /// Writes `<stem>.svg` and `<stem>.png` (creating the parent directory) and returns their
    /// paths, SVG first. The suffixes are appended, not substituted, so `bw.8k` keeps its dot.
    pub fn write(&self, stem: &Path) -> Result<Vec<PathBuf>, String> {
        if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let svg = with_suffix(stem, "svg");
        std::fs::write(&svg, self.to_svg()?).map_err(|e| format!("writing {}: {e}", svg.display()))?;
        let png = with_suffix(stem, "png");
        std::fs::write(&png, self.to_png()?).map_err(|e| format!("writing {}: {e}", png.display()))?;
        Ok(vec![svg, png])
    }

    /// The chart as an SVG document.
    pub fn to_svg(&self) -> Result<String, String> {
        register_font()?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(|e| format!("drawing SVG: {e}"))?;
        }
        Ok(svg)
    }

    /// The chart as PNG file bytes. plotters draws into an RGB buffer and the `png` crate encodes
    /// it, which avoids plotters' `image` dependency (JPEG, BMP and GIF codecs we never use).
    pub fn to_png(&self) -> Result<Vec<u8>, String> {
        register_font()?;
        let (w, h) = SIZE;
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(|e| format!("drawing PNG: {e}"))?;
        }
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| format!("encoding PNG: {e}"))?;
        writer.write_image_data(&rgb).map_err(|e| format!("encoding PNG: {e}"))?;
        writer.finish().map_err(|e| format!("encoding PNG: {e}"))?;
        Ok(out)
    }

    /// Draws onto any backend. The four linear/log combinations are four coordinate types in
    /// plotters, hence the dispatch into one generic body.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| format!("drawing: {e}"))?;
        let data = Prepared::new(self);
        let (x, y) = (data.x.clone(), data.y.clone());
        match (self.log_x, self.log_y) {
            (false, false) => self.draw_in(root, &data, x, y),
            (true, false) => self.draw_in(root, &data, x.log_scale(), y),
            (false, true) => self.draw_in(root, &data, x, y.log_scale()),
            (true, true) => self.draw_in(root, &data, x.log_scale(), y.log_scale()),
        }
        .map_err(|e| format!("drawing: {e}"))
    }

    fn draw_in<'a, DB, X, Y>(
        &self,
        root: &'a DrawingArea<DB, Shift>,
        data: &Prepared,
        x: X,
        y: Y,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
    where
        // The legend closure lives as long as the chart, and its glyphs name `DB`.
        DB: DrawingBackend + 'a,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT, 26))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)?;

        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .axis_desc_style((FONT, 18))
            .label_style((FONT, 15))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .bold_line_style(RGBColor(0xcc, 0xcc, 0xcc))
            .x_label_formatter(&|v| tick_label(*v))
            .y_label_formatter(&|v| tick_label(*v));
        if let Some(n) = data.integer_x_labels {
            mesh.x_labels(n);
        }
        mesh.draw()?;

        for (i, s) in data.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let shape = i % SHAPES;
            if self.lines {
                for segment in &s.segments {
                    chart.draw_series(LineSeries::new(segment.iter().copied(), colour.stroke_width(2)))?;
                }
            }
            let markers =
                s.segments.iter().flatten().map(|&p| EmptyElement::at(p) + glyph::<DB>(shape, colour));
            // A scatter's legend shows the marker alone: its sample line is fully transparent,
            // which both backends skip. (One element type for both cases, since plotters' boxed
            // `DynElement` would force the backend type to be `'static` here.)
            let sample_line = if self.lines { colour.stroke_width(2) } else { TRANSPARENT.stroke_width(0) };
            chart.draw_series(markers)?.label(s.label.as_str()).legend(move |p| {
                EmptyElement::at(p)
                    + PathElement::new(vec![(-14, 0), (14, 0)], sample_line)
                    + glyph::<DB>(shape, colour)
            });
        }

        if !data.series.is_empty() {
            chart
                .configure_series_labels()
                .position(data.legend_corner.clone())
                .label_font((FONT, 15))
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(0x99, 0x99, 0x99))
                .margin(12)
                .draw()?;
        }

        if data.empty {
            let area = chart.plotting_area();
            let (w, h) = area.dim_in_pixel();
            let centre = Pos::new(HPos::Center, VPos::Center);
            let style =
                TextStyle::from((FONT, 22).into_font()).color(&RGBColor(0x88, 0x88, 0x88)).pos(centre);
            // Pixel coordinates: `strip_coord_spec` leaves the data coordinates behind.
            area.strip_coord_spec().draw(&Text::new("no data", (w as i32 / 2, h as i32 / 2), style))?;
        }
        Ok(())
    }
}

/// What the chart will actually draw, worked out once before any backend is touched.
struct Prepared {
    series: Vec<PreparedSeries>,
    x: Range<f64>,
    y: Range<f64>,
    /// No drawable point in any series.
    empty: bool,
    /// `Some(n)`: every x is an integer (ranks, counts), so ask for at most `n` labels, which
    /// keeps plotters from putting ticks at half ranks.
    integer_x_labels: Option<usize>,
    legend_corner: SeriesLabelPosition,
}

struct PreparedSeries {
    /// Name plus, when points were dropped, how many and why.
    label: String,
    /// Runs of drawable points; a dropped point breaks the line rather than being bridged, since
    /// a straight line across a missing point would show a value nobody measured.
    segments: Vec<Vec<(f64, f64)>>,
}

impl Prepared {
    fn new(chart: &Chart) -> Self {
        let mut series = Vec::with_capacity(chart.series.len());
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for s in &chart.series {
            let (mut segments, mut run) = (Vec::new(), Vec::new());
            // Points left out, by `Skip` variant.
            let mut skipped = [0usize; 3];
            for &(x, y) in &s.points {
                match skip(x, chart.log_x).or(skip(y, chart.log_y)) {
                    None => {
                        run.push((x, y));
                        xs.push(x);
                        ys.push(y);
                    }
                    Some(why) => {
                        skipped[why as usize] += 1;
                        if !run.is_empty() {
                            segments.push(std::mem::take(&mut run));
                        }
                    }
                }
            }
            if !run.is_empty() {
                segments.push(run);
            }
            let name = if s.name.is_empty() { "(unnamed)" } else { s.name.as_str() };
            let reasons = ["non-finite", "<= 0 on log axis", "out of range"];
            let dropped: Vec<String> = skipped
                .iter()
                .zip(reasons)
                .filter(|(&n, _)| n > 0)
                .map(|(n, why)| format!("{n} {why}"))
                .collect();
            let label = if dropped.is_empty() {
                name.to_string()
            } else {
                format!("{name} ({} not shown)", dropped.join(", "))
            };
            series.push(PreparedSeries { label, segments });
        }

        let x = axis_range(&xs, chart.log_x);
        let y = axis_range(&ys, chart.log_y);
        let integer_x_labels = (!chart.log_x && !xs.is_empty() && xs.iter().all(|v| v.fract() == 0.0))
            .then(|| (x.end.floor() - x.start.ceil()).clamp(1.0, 11.0) as usize + 1);
        let legend_corner = quietest_corner(&xs, &ys, (&x, chart.log_x), (&y, chart.log_y));
        Prepared { series, empty: xs.is_empty(), x, y, integer_x_labels, legend_corner }
    }
}

/// Largest magnitude drawn, and on a log axis the reciprocal is the smallest value. plotters walks
/// tick positions in floating point and loops forever on an axis whose width overflows or whose
/// ticks are too fine to add up; within ±1e100 neither happens, and no measurement is bigger.
const LIMIT: f64 = 1e100;

/// Why a point is left out; the discriminant indexes the per-series counts.
#[derive(Clone, Copy)]
enum Skip {
    NonFinite = 0,
    NonPositive = 1,
    OutOfRange = 2,
}

/// `None` when `v` can be drawn on this axis.
fn skip(v: f64, log: bool) -> Option<Skip> {
    if !v.is_finite() {
        Some(Skip::NonFinite)
    } else if log && v <= 0.0 {
        Some(Skip::NonPositive)
    } else if v.abs() > LIMIT || (log && v < 1.0 / LIMIT) {
        Some(Skip::OutOfRange)
    } else {
        None
    }
}

/// The axis range for these (already drawable) values.
///
/// Linear: the data span plus 4% each side, so edge markers are not cut in half. A span too narrow
/// to label in floating point (below a billionth of the values) counts as one value, shown ±10%
/// around it (±1 around zero). Log: widened to whole decades, because plotters labels only
/// powers of ten and would leave a sub-decade axis with no labels at all.
fn axis_range(values: &[f64], log: bool) -> Range<f64> {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        let lo = 10f64.powf(lo.log10().floor());
        let mut hi = 10f64.powf(hi.log10().ceil());
        if hi <= lo {
            hi = lo * 10.0;
        }
        // Just outside the decades, so rounding in plotters' tick walk still hits both ends.
        return lo * (1.0 - 1e-9)..hi * (1.0 + 1e-9);
    }
    let magnitude = lo.abs().max(hi.abs());
    if hi - lo < (magnitude * 1e-9).max(1.0 / LIMIT) {
        let centre = lo / 2.0 + hi / 2.0;
        let half = if magnitude < 1.0 / LIMIT { 1.0 } else { magnitude * 0.1 };
        return centre - half..centre + half;
    }
    let pad = (hi - lo) * 0.04;
    lo - pad..hi + pad
}

/// The legend corner covering the fewest points, so the legend hides as little data as possible.
/// Ties keep the first corner in reading order.
fn quietest_corner(
    xs: &[f64],
    ys: &[f64],
    x: (&Range<f64>, bool),
    y: (&Range<f64>, bool),
) -> SeriesLabelPosition {
    // Position along an axis in 0..=1, in the axis' own (linear or log) scale.
    let frac = |v: f64, (r, log): (&Range<f64>, bool)| {
        if log {
            (v / r.start).ln() / (r.end / r.start).ln()
        } else {
            (v - r.start) / (r.end - r.start)
        }
    };
    // Legend boxes take roughly the outer 40% of the width and height.
    let mut counts = [0usize; 4]; // upper-left, upper-right, lower-left, lower-right
    for (&px, &py) in xs.iter().zip(ys) {
        let (fx, fy) = (frac(px, x), frac(py, y));
        let col = if fx <= 0.4 {
            Some(0)
        } else if fx >= 0.6 {
            Some(1)
        } else {
            None
        };
        let row = if fy >= 0.6 {
            Some(0)
        } else if fy <= 0.4 {
            Some(2)
        } else {
            None
        };
        if let (Some(c), Some(r)) = (col, row) {
            counts[r + c] += 1;
        }
    }
    let best = (0..4).min_by_key(|&i| counts[i]).unwrap_or(0);
    [
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::LowerLeft,
        SeriesLabelPosition::LowerRight,
    ][best]
        .clone()
}

/// A marker centred on (0, 0) in pixels: filled circle, triangle, square, or a cross.
fn glyph<DB: DrawingBackend>(shape: usize, colour: RGBColor) -> DynElement<'static, DB, (i32, i32)> {
    match shape % SHAPES {
        0 => Circle::new((0, 0), 4, colour.filled()).into_dyn(),
        1 => TriangleMarker::new((0, 0), 5, colour.filled()).into_dyn(),
        2 => Rectangle::new([(-4, -4), (4, 4)], colour.filled()).into_dyn(),
        _ => Cross::new((0, 0), 4, colour.stroke_width(2)).into_dyn(),
    }
}

/// Tick text: up to four integer digits plainly, with at most six decimals and no trailing zeros
/// (so float noise like `0.30000000000000004` prints as `0.3`); larger or tiny values in short
/// scientific form (`1e4`, `2.5e9`, `1e-6`), so a log axis over many decades reads 100, 1000,
/// 1e4, 1e5 rather than a column of ever longer zeros.
fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into(); // also turns -0 into 0
    }
    let a = v.abs();
    if (1e-3..1e4).contains(&a) {
        let s = format!("{v:.6}");
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let s = format!("{v:.3e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            format!("{}e{exp}", mantissa.trim_end_matches('0').trim_end_matches('.'))
        }
        None => s,
    }
}

fn with_suffix(stem: &Path, ext: &str) -> PathBuf {
    let mut name = OsString::from(stem.as_os_str());
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// Registers the embedded font once per process. Registration parses the font; it cannot fail for
/// the bundled file, but an error is still returned rather than unwrapped.
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font could not be parsed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringcast-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn sweep() -> Chart {
        let mut c = Chart::new("Broadcast completion time", "message size (bytes)", "time (us)");
        c.log_x = true;
        c.log_y = true;
        let sizes = [64.0, 1024.0, 16384.0, 262144.0, 4194304.0];
        c.add("binomial", sizes.iter().map(|&s| (s, 5.0 + s / 1e3)).collect());
        c.add("chain", sizes.iter().map(|&s| (s, 20.0 + s / 4e3)).collect());
        c.add("linear & <escaped>", sizes.iter().map(|&s| (s, 3.0 + s / 5e2)).collect());
        c
    }

    fn c_with(log: bool, points: Vec<(f64, f64)>) -> Chart {
        let mut c = Chart { log_x: log, log_y: log, ..Chart::new("t", "x", "y") };
        c.add("s", points);
        c
    }

    /// The trimmed contents of every `<text>` element of an SVG.
    fn svg_texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect()
    }

    /// Decodes a PNG and returns (width, height, RGB pixels).
    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().expect("PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("PNG data");
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn write_produces_svg_and_png() {
        let dir = temp_dir("write");
        let paths = sweep().write(&dir.join("figs").join("bcast.8k")).expect("write");
        assert_eq!(paths, [dir.join("figs/bcast.8k.svg"), dir.join("figs/bcast.8k.png")]);

        let svg = std::fs::read_to_string(&paths[0]).expect("svg");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        let texts = svg_texts(&svg);
        for label in ["Broadcast completion time", "message size (bytes)", "time (us)", "binomial", "chain"] {
            assert!(texts.contains(&label), "{label} missing from {texts:?}");
        }
        assert!(texts.contains(&"linear &amp; &lt;escaped&gt;"), "legend text must be XML-escaped");
        // Log axes label whole decades.
        assert!(texts.contains(&"1000") && texts.contains(&"1e4"), "{texts:?}");

        let png = std::fs::read(&paths[1]).expect("png");
        assert!(png.starts_with(PNG_MAGIC));
        let (w, h, rgb) = decode(&png);
        assert_eq!((w, h), SIZE);
        // Text and series were drawn: the image is not blank white, and has series colours.
        assert!(rgb.chunks(3).any(|p| p != [255, 255, 255]));
        let first = COLOURS[0];
        assert!(rgb.chunks(3).any(|p| p == [first.0, first.1, first.2]), "series colour missing");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn png_text_is_rendered() {
        // A chart whose only dark pixels can come from text: no series, no axes labels differ.
        // Compare against the same chart with a much longer title: more text, more dark pixels.
        let dark = |c: &Chart| {
            let (_, _, rgb) = decode(&c.to_png().expect("png"));
            rgb.chunks(3).filter(|p| p.iter().all(|&v| v < 100)).count()
        };
        let short = Chart::new("A", "x", "y");
        let long = Chart::new("A much longer title drawn with the embedded font", "x", "y");
        assert!(dark(&long) > dark(&short) + 200, "title glyphs were not rasterised");
    }

    #[test]
    fn degenerate_data_never_panics() {
        let mut c = Chart::new("degenerate", "x", "y");
        c.log_x = true;
        c.log_y = true;
        c.add("", vec![]);
        c.add("zeros", vec![(0.0, 1.0), (1.0, 0.0), (-3.0, -3.0)]);
        c.add("nan", vec![(f64::NAN, 1.0), (2.0, f64::INFINITY)]);
        c.add("one", vec![(10.0, 10.0)]);
        let svg = c.to_svg().expect("svg");
        let texts = svg_texts(&svg);
        assert!(texts.contains(&"zeros (3 &lt;= 0 on log axis not shown)"), "{texts:?}");
        assert!(texts.contains(&"nan (2 non-finite not shown)"), "{texts:?}");
        assert!(texts.contains(&"(unnamed)") && texts.contains(&"one"), "{texts:?}");
        assert!(!texts.contains(&"no data"));
        assert!(c.to_png().expect("png").starts_with(PNG_MAGIC));

        // Nothing drawable anywhere, on every axis kind, and no series at all.
        for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
            for series in [vec![], vec![Series::new("neg", vec![(-1.0, -1.0)])]] {
                let c = Chart { log_x, log_y, series, ..Chart::new("empty", "x", "y") };
                let svg = c.to_svg().expect("svg");
                let nothing_drawable = log_x || log_y || c.series.is_empty();
                assert_eq!(svg_texts(&svg).contains(&"no data"), nothing_drawable, "log {log_x}/{log_y}");
                // PNG shares the drawing code; one log/log case suffices (encoding is slow in debug).
                if log_x && log_y {
                    assert!(c.to_png().expect("png").starts_with(PNG_MAGIC));
                }
            }
        }

        // Extreme magnitudes and spans: each of these once made plotters' tick search loop forever.
        for (log_x, log_y) in [(false, false), (true, true)] {
            let mut c = Chart { log_x, log_y, ..Chart::new("extreme", "x", "y") };
            c.add("huge", vec![(-f64::MAX, f64::MIN_POSITIVE), (f64::MAX, f64::MAX), (1e-320, 1e300)]);
            c.add("edges", vec![(1e-100, 1e100), (1e100, 1e-100)]);
            c.add("ulp", vec![(1.0, 1.0), (1.0 + f64::EPSILON, 1.0 + 2.0 * f64::EPSILON)]);
            c.add("tiny", vec![(1e-200, 3e-200), (2e-200, 1e-200)]);
            let texts = svg_texts(&c.to_svg().expect("svg")).join("|");
            assert!(texts.contains("huge ("), "log {log_x}/{log_y}: {texts}");
        }
        assert!(svg_texts(&c_with(false, vec![(1.0, f64::MAX)]).to_svg().expect("svg"))
            .contains(&"s (1 out of range not shown)"));

        // Constant and single values on linear axes.
        let mut c = Chart::new("flat", "x", "y");
        c.add("flat", vec![(1.0, 5.0), (2.0, 5.0)]);
        c.add("zero", vec![(0.0, 0.0)]);
        assert!(c.to_svg().expect("svg").starts_with("<svg"));
    }

    #[test]
    fn per_rank_scatter() {
        let mut c = Chart::per_rank("Per-rank completion, 1 MiB", "completion time (us)");
        assert!(!c.lines);
        for (algo, slope) in [("binomial", 3.0), ("chain", 1.0), ("binary", 2.0)] {
            c.add(algo, (0..16).map(|r| (r as f64, 10.0 + slope * r as f64)).collect());
        }
        let svg = c.to_svg().expect("svg");
        // Markers only: the same chart with lines has one more polyline per series (the axes and
        // grid are polylines too, so count the difference).
        let joined = Chart { lines: true, ..c.clone() }.to_svg().expect("svg");
        let polylines = |s: &str| s.matches("<polyline").count();
        assert_eq!(polylines(&joined), polylines(&svg) + 3 + 3, "3 curves and 3 legend samples");
        let texts = svg_texts(&svg);
        assert!(texts.contains(&"rank"), "{texts:?}");
        // Integer ranks: every x tick label is an integer (no tick at a half rank).
        assert!(texts.contains(&"0") && texts.contains(&"14"), "{texts:?}");
        assert!(!texts.iter().any(|t| t.ends_with(".5")), "{texts:?}");
        assert!(c.to_png().expect("png").starts_with(PNG_MAGIC));
    }

    #[test]
    fn axis_ranges() {
        assert_eq!(axis_range(&[], false), 0.0..1.0);
        assert_eq!(axis_range(&[], true), 1.0..10.0);
        let r = axis_range(&[20.0, 80.0], true);
        assert!((r.start - 10.0).abs() < 1e-6 && (r.end - 100.0).abs() < 1e-6, "{r:?}");
        let r = axis_range(&[100.0], true);
        assert!((r.start - 100.0).abs() < 1e-6 && (r.end - 1000.0).abs() < 1e-5, "{r:?}");
        let r = axis_range(&[0.0, 100.0], false);
        assert_eq!(r, -4.0..104.0);
        assert_eq!(axis_range(&[0.0], false), -1.0..1.0);
        assert_eq!(axis_range(&[-10.0], false), -11.0..-9.0);
        let r = axis_range(&[1.0, 1.0 + f64::EPSILON], false);
        assert!((r.start - 0.9).abs() < 1e-12 && (r.end - 1.1).abs() < 1e-12, "{r:?}");
        assert_eq!(axis_range(&[0.0, 1e-200], false), -1.0..1.0);
        let r = axis_range(&[1e-100, 1e100], true);
        assert!(r.start > 0.0 && r.end.is_finite() && (r.end / r.start).is_finite(), "{r:?}");
    }

    #[test]
    fn tick_labels() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(-0.0), "0");
        assert_eq!(tick_label(5.0), "5");
        assert_eq!(tick_label(0.1 + 0.2), "0.3");
        assert_eq!(tick_label(-2.5), "-2.5");
        assert_eq!(tick_label(1e6), "1e6");
        assert_eq!(tick_label(1e4), "1e4");
        assert_eq!(tick_label(9999.0), "9999");
        assert_eq!(tick_label(12500.0), "1.25e4");
        assert_eq!(tick_label(2.5e9), "2.5e9");
        assert_eq!(tick_label(1e-6), "1e-6");
        assert_eq!(tick_label(0.001), "0.001");
    }

    #[test]
    fn legend_avoids_the_data() {
        // Rising curve: points fill lower-left and upper-right, so the legend goes upper-left.
        let xs = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let r = 0.0..10.0;
        let pos = quietest_corner(&xs, &xs, (&r, false), (&r, false));
        assert!(matches!(pos, SeriesLabelPosition::UpperLeft));
        let falling: Vec<f64> = xs.iter().map(|x| 10.0 - x).collect();
        let pos = quietest_corner(&xs, &falling, (&r, false), (&r, false));
        assert!(matches!(pos, SeriesLabelPosition::UpperRight));
        let top: Vec<f64> = vec![10.0; xs.len()];
        let pos = quietest_corner(&xs, &top, (&r, false), (&r, false));
        assert!(matches!(pos, SeriesLabelPosition::LowerLeft));
    }
}
