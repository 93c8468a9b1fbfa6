//! Simulation scenarios as TOML files (`fixtures/sim/*.toml`), overridable from the command line
//! with `--set key.path=value` (the value in TOML syntax, e.g. `--set sweep.ranks=[16,1024]`).
//!
//! A scenario names the fabric (LogGP per link class, lanes, switch), the placement, engine
//! tunables, and the sweep: algorithms × ranks × message sizes × multicast loss, optionally ×
//! channels × placements. Every field but `name` has a default, so `--set` alone can describe a
//! run. Unknown keys are errors (a typo must not silently run the default).
use ringcast_proto::comm::Layout;
use ringcast_proto::config::EngineConfig as Config;
use ringcast_proto::model::{FabricModel, LogGp};
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_sim::experiments::Pacing;
use ringcast_sim::fabric::Faults;
use ringcast_sim::perf::{sim_config, Setup};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One link class; `gbps` is a shorthand for `ns_per_byte = 8 / gbps`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    latency_ns: Option<f64>,
    overhead_ns: Option<f64>,
    gap_ns: Option<f64>,
    ns_per_byte: Option<f64>,
    gbps: Option<f64>,
}

impl LinkSpec {
    fn apply(&self, base: LogGp) -> LogGp {
        LogGp {
            latency_ns: self.latency_ns.unwrap_or(base.latency_ns),
            overhead_ns: self.overhead_ns.unwrap_or(base.overhead_ns),
            gap_ns: self.gap_ns.unwrap_or(base.gap_ns),
            ns_per_byte: self
                .gbps
                .map(|g| 8.0 / g.max(1e-9))
                .or(self.ns_per_byte)
                .unwrap_or(base.ns_per_byte),
        }
    }
}

/// The fabric section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    lanes: Option<u32>,
    switch_ns: Option<f64>,
    intra_node: Option<LinkSpec>,
    intra_site: Option<LinkSpec>,
    wan: Option<LinkSpec>,
}

/// A placement: `ppn` ranks per node, `block` or `cyclic`, `sites`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    ppn: Option<u32>,
    placement: Option<String>,
    sites: Option<u32>,
}

impl LayoutSpec {
    fn layout(&self) -> Result<Layout, String> {
        let cyclic = match self.placement.as_deref().unwrap_or("block") {
            "block" => false,
            "cyclic" => true,
            other => return Err(format!("placement {other:?}: block or cyclic")),
        };
        let (ppn, sites) = (self.ppn.unwrap_or(1), self.sites.unwrap_or(1));
        if ppn == 0 || sites == 0 {
            return Err("ppn and sites must be at least 1".into());
        }
        Ok(Layout { ppn, cyclic, sites })
    }
}

/// The sweep section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    algorithms: Option<Vec<String>>,
    ranks: Option<Vec<u32>>,
    bytes: Option<Vec<u32>>,
    loss: Option<Vec<f64>>,
    channels: Option<Vec<u32>>,
    layouts: Option<Vec<LayoutSpec>>,
    broadcasts: Option<usize>,
    root: Option<u32>,
    skew_ns: Option<u64>,
    seed: Option<u64>,
    /// `barrier` (one broadcast's latency) or `loop` (back to back, time per broadcast).
    pacing: Option<String>,
}

/// The faults section (multicast loss is swept in `sweep.loss`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    ucast_loss: Option<f64>,
    /// Gilbert–Elliott bursts: probability per datagram of entering / leaving the bad state.
    burst_enter: Option<f64>,
    burst_leave: Option<f64>,
    corrupt: Option<f64>,
    duplicate: Option<f64>,
    jitter_ns: Option<u64>,
}

/// The plots section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    /// X axis of the latency chart: `ranks`, `bytes`, `loss`, `channels` or `layout`.
    x: Option<String>,
    /// Plot per-rank completion times at this P (and tabulate their spread).
    per_rank_at: Option<u32>,
    log_x: Option<bool>,
    log_y: Option<bool>,
}

/// A scenario file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    name: String,
    title: Option<String>,
    /// The paper's claim this scenario reproduces (printed with the results).
    claim: Option<String>,
    fabric: Option<FabricSpec>,
    layout: Option<LayoutSpec>,
    /// Engine tunables by name (as `ringcast info` lists them).
    engine: Option<BTreeMap<String, toml::Value>>,
    sweep: Option<SweepSpec>,
    faults: Option<FaultSpec>,
    plots: Option<PlotSpec>,
}

/// The axis a chart's x runs along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Communicator size.
    Ranks,
    /// Message size.
    Bytes,
    /// Multicast loss.
    Loss,
    /// Channels.
    Channels,
    /// Placement (index into the layouts).
    Layout,
}

/// A scenario ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// File-safe name.
    pub name: String,
    /// Human title.
    pub title: String,
    /// The paper's claim, if any.
    pub claim: Option<String>,
    /// Everything but the swept dimensions.
    pub setup: Setup,
    /// Algorithms (`None` = the engine's choice).
    pub algorithms: Vec<Option<Algorithm>>,
    /// Communicator sizes.
    pub ranks: Vec<u32>,
    /// Message sizes.
    pub bytes: Vec<u32>,
    /// Multicast loss rates.
    pub loss: Vec<f64>,
    /// Channel counts (the setup's when empty).
    pub channels: Vec<u32>,
    /// Placements (the setup's when empty).
    pub layouts: Vec<Layout>,
    /// Chart x axis.
    pub x: Axis,
    /// Per-rank plot at this P.
    pub per_rank_at: Option<u32>,
    /// Log axes.
    pub log_x: bool,
    /// See `log_x`.
    pub log_y: bool,
}

/// Reads `text` (a scenario file, or empty for the defaults) with `sets` (`a.b=value`) applied.
pub fn parse(text: &str, sets: &[String]) -> Result<Scenario, String> {
    let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    for s in sets {
        let (path, value) = s.split_once('=').ok_or_else(|| format!("--set {s}: expected key.path=value"))?;
        let value: toml::Value = match format!("v = {value}").parse::<toml::Table>() {
            Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(value.into())),
            Err(_) => toml::Value::String(value.trim().into()), // bare words: strings
        };
        let mut at = &mut doc;
        let keys: Vec<&str> = path.trim().split('.').collect();
        for k in &keys[..keys.len() - 1] {
            let entry = at.entry(k.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
            at = entry.as_table_mut().ok_or_else(|| format!("--set {s}: {k} is not a table"))?;
        }
        at.insert(keys[keys.len() - 1].to_string(), value);
    }
    doc.entry("name").or_insert_with(|| toml::Value::String("adhoc".into()));
    let f: File = toml::Value::Table(doc).try_into().map_err(|e: toml::de::Error| e.to_string())?;
    build(f)
}

fn build(f: File) -> Result<Scenario, String> {
    let mut fabric = FabricModel::default_cluster();
    if let Some(fs) = &f.fabric {
        fabric.lanes = fs.lanes.unwrap_or(fabric.lanes);
        if !(1..=8).contains(&fabric.lanes) {
            return Err(format!("fabric.lanes {} outside 1..=8", fabric.lanes));
        }
        fabric.switch_ns = fs.switch_ns.unwrap_or(fabric.switch_ns);
        if let Some(l) = &fs.intra_node {
            fabric.intra_node = l.apply(fabric.intra_node);
        }
        if let Some(l) = &fs.intra_site {
            fabric.intra_site = l.apply(fabric.intra_site);
        }
        if let Some(l) = &fs.wan {
            fabric.wan = l.apply(fabric.wan);
        }
    }
    let layout = f.layout.clone().unwrap_or_default().layout()?;
    let sw = f.sweep.clone().unwrap_or_default();
    let bytes = sw.bytes.clone().unwrap_or_else(|| vec![8]);
    let largest = bytes.iter().copied().max().unwrap_or(8).max(1);
    let mut config = sim_config(4, largest.max(64 << 10));
    config = apply_engine(config, f.engine.as_ref())?;
    config.validate().map_err(|e| e.to_string())?;
    let algorithms = sw
        .algorithms
        .clone()
        .unwrap_or_else(|| vec!["auto".into()])
        .iter()
        .map(|a| match a.as_str() {
            "auto" => Ok(None),
            name => Algorithm::from_name(name).map(Some).ok_or_else(|| {
                let all: Vec<_> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                format!("algorithm {name:?}: one of auto, {}", all.join(", "))
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let layouts: Vec<Layout> =
        sw.layouts.clone().unwrap_or_default().iter().map(LayoutSpec::layout).collect::<Result<_, _>>()?;
    let ranks = sw.ranks.clone().unwrap_or_else(|| vec![16]);
    // A simulated rank of a small broadcast holds under 2 KB (docs/performance.md): ten
    // million fit a 24 GiB machine.
    if ranks.iter().any(|&p| p == 0 || p > 10_000_000) {
        return Err("ranks must be within 1..=10000000".into());
    }
    let loss = sw.loss.clone().unwrap_or_else(|| vec![0.0]);
    let fs = f.faults.clone().unwrap_or_default();
    let faults = Faults {
        latency: 0,
        jitter: fs.jitter_ns.unwrap_or(0),
        ucast_loss: fs.ucast_loss.unwrap_or(0.0),
        burst_enter: fs.burst_enter.unwrap_or(0.0),
        burst_leave: fs.burst_leave.unwrap_or(0.0),
        corrupt: fs.corrupt.unwrap_or(0.0),
        duplicate: fs.duplicate.unwrap_or(0.0),
        ..Faults::clean()
    };
    let probs = [faults.ucast_loss, faults.burst_enter, faults.burst_leave, faults.corrupt, faults.duplicate];
    if loss.iter().chain(probs.iter()).any(|l| !(0.0..=1.0).contains(l)) {
        return Err("loss rates must be within 0..=1".into());
    }
    let channels = sw.channels.clone().unwrap_or_default();
    let plots = f.plots.clone().unwrap_or_default();
    let x = match plots.x.as_deref() {
        Some("ranks") => Axis::Ranks,
        Some("bytes") => Axis::Bytes,
        Some("loss") => Axis::Loss,
        Some("channels") => Axis::Channels,
        Some("layout") => Axis::Layout,
        Some(other) => return Err(format!("plots.x {other:?}: ranks, bytes, loss, channels or layout")),
        None if ranks.len() > 1 => Axis::Ranks,
        None if bytes.len() > 1 => Axis::Bytes,
        None if channels.len() > 1 => Axis::Channels,
        None if layouts.len() > 1 => Axis::Layout,
        None => Axis::Loss,
    };
    let setup = Setup {
        fabric,
        layout,
        config,
        broadcasts: sw.broadcasts.unwrap_or(4),
        root: sw.root.unwrap_or(0),
        skew_ns: sw.skew_ns.unwrap_or(0),
        faults,
        seed: sw.seed.unwrap_or(1),
        pacing: match sw.pacing.as_deref().unwrap_or("barrier") {
            "barrier" => Pacing::Barrier,
            "loop" => Pacing::Pipelined,
            other => return Err(format!("sweep.pacing {other:?}: barrier or loop")),
        },
    };
    Ok(Scenario {
        title: f.title.clone().unwrap_or_else(|| f.name.clone()),
        name: f.name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect(),
        claim: f.claim,
        setup,
        algorithms,
        ranks,
        bytes,
        loss,
        channels,
        layouts,
        x,
        per_rank_at: plots.per_rank_at,
        log_x: plots.log_x.unwrap_or(x == Axis::Ranks || x == Axis::Bytes),
        log_y: plots.log_y.unwrap_or(false),
    })
}

/// Engine tunables by name (`protocol.channels`, or `channels` where the field's name is its
/// own) over `config`, through the same parser as `RINGCAST_*`.
fn apply_engine(config: Config, engine: Option<&BTreeMap<String, toml::Value>>) -> Result<Config, String> {
    let Some(engine) = engine else { return Ok(config) };
    let rows = config.rows();
    let mut env = BTreeMap::new();
    for (k, v) in engine {
        let row = find_row(&rows, k).ok_or_else(|| format!("engine.{k}: no such tunable"))?;
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(format!("engine.{k}: a string, number or boolean")),
        };
        env.insert(row.env, text);
    }
    // Start from `config`, not the defaults: re-parse only the named ones.
    let parsed = Config::from_lookup(&|k| env.get(k).cloned()).map_err(|e| e.to_string())?;
    let mut out = config;
    for k in engine.keys() {
        out = copy_tunable(out, &parsed, k);
    }
    Ok(out)
}

/// `to` with tunable `name` taken from `from` (via the tunables' text form, which round-trips).
fn copy_tunable(to: Config, from: &Config, name: &str) -> Config {
    let (from_rows, rows) = (from.rows(), to.rows());
    let Some(target) = find_row(&from_rows, name) else { return to };
    let value = Some(target.current.clone());
    let lookup = |env: &str| {
        let row = rows.iter().find(|r| r.env == env)?;
        if row.name == target.name {
            value.clone()
        } else {
            Some(row.current.clone())
        }
    };
    Config::from_lookup(&lookup).unwrap_or(to)
}

/// The row named `name`: `section.field`, or the bare field when no other section has one so
/// named.
fn find_row<'a>(
    rows: &'a [ringcast_proto::config::TunableRow],
    name: &str,
) -> Option<&'a ringcast_proto::config::TunableRow> {
    rows.iter().find(|r| r.name == name).or_else(|| {
        let mut bare = rows.iter().filter(|r| r.name.rsplit('.').next() == Some(name));
        match (bare.next(), bare.next()) {
            (Some(r), None) => Some(r),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_override_the_file_and_typos_are_errors() {
        let s = parse(
            "name = \"t\"\n[sweep]\nranks = [4]\n[engine]\nchannels = 8\n",
            &[
                "sweep.ranks=[16, 32]".into(),
                "fabric.lanes=2".into(),
                "sweep.algorithms=[\"dual-tree\"]".into(),
            ],
        )
        .unwrap();
        assert_eq!(s.ranks, vec![16, 32]);
        assert_eq!(s.setup.fabric.lanes, 2);
        assert_eq!(s.setup.config.protocol.channels, 8);
        assert_eq!(s.setup.config.limits.max_comms, 1, "simulator defaults kept under overrides");
        assert_eq!(s.algorithms, vec![Some(Algorithm::DualTree)]);
        assert!(parse("name = \"t\"\n[sweep]\nrank = [4]\n", &[]).is_err());
        assert!(parse("", &["sweep.algorithms=[\"quantum\"]".into()]).is_err());
        assert!(parse("", &["engine.nonsense=1".into()]).is_err());
        assert!(parse("", &["sweep.loss=[1.5]".into()]).is_err());
        assert!(parse("", &["faults.corrupt=2.0".into()]).is_err());
        let f = parse("", &["faults.burst_enter=0.05".into(), "faults.jitter_ns=300".into()]).unwrap();
        assert_eq!((f.setup.faults.burst_enter, f.setup.faults.jitter), (0.05, 300));
    }
}
