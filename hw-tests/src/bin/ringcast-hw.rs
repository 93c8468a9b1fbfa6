//! `ringcast-hw`: the processes of the hardware-path tests, and the measurement of the `dpdk`
//! fabric (AF_XDP) against the `udp` fabric on the same namespaces in one run.
//!
//! * `ringcast-hw host verify|bench --engine NAME --node I --nodes N --sizes A,B --counts C,D`
//!   — a broadcast host ([`ringcast_hw_tests::roles::host_verify`], `host_bench`);
//! * `ringcast-hw host lifecycle --engine NAME --node I --nodes N --job J [--cycles 10000]
//!   [--check-every 1000] [--leak K] [--epoch 16]` — communicators created and freed
//!   ([`ringcast_hw_tests::roles::host_lifecycle`]);
//! * `ringcast-hw fabric --kind dpdk|udp --node I --members LIST [--vdev V] --mode
//!   verify|flood|sink --count N --len L --job J` — a fabric member
//!   ([`ringcast_hw_tests::roles::fabric_member`]);
//! * `ringcast-hw bench [--nodes 3] [--frames 100000] [--counts 2000,50] [--rounds 3]` — creates a lab
//!   (bridge + namespaces), measures frames per second (one member floods multicast datagrams of
//!   64 and 1472 bytes, the others count what they get) and broadcast latency (2 B and 1 MiB,
//!   through real engines and hosts: rotating root and back to back from root 0) on `udp` and
//!   on `dpdk` over `net_af_xdp`, `rounds` times with the fabrics alternating, and prints the
//!   medians side by side (`RINGCAST_HW_AF_XDP_VDEV` replaces the AF_XDP device string, to compare
//!   driver options). Timing only: it asserts nothing about speed. Prints `SKIP: <reason>` and
//!   exits 0 where AF_XDP cannot run.
//!
//! A child reports failure as a `FAIL <why>` line and exit status 1.
use ringcast_hw_tests::cluster::{af_xdp_vdev, Cluster, Net};
use ringcast_hw_tests::env;
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::proc::{self, Child};
use ringcast_hw_tests::roles::{self, FabricArgs, HostArgs, Kind};
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

/// `--key value` pairs after the subcommand words.
fn options(args: &[String]) -> Result<HashMap<String, String>, String> {
    let mut map = HashMap::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let key = k.strip_prefix("--").ok_or_else(|| format!("expected --option, got {k:?}"))?;
        let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
        map.insert(key.to_string(), v.clone());
    }
    Ok(map)
}

fn get<T: std::str::FromStr>(o: &HashMap<String, String>, k: &str, default: Option<T>) -> Result<T, String> {
    match o.get(k) {
        Some(v) => v.parse().map_err(|_| format!("--{k} {v:?} does not parse")),
        None => default.ok_or_else(|| format!("--{k} is required")),
    }
}

fn list<T: std::str::FromStr>(o: &HashMap<String, String>, k: &str, default: &str) -> Result<Vec<T>, String> {
    o.get(k)
        .map_or(default, String::as_str)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().map_err(|_| format!("--{k}: {s:?} does not parse")))
        .collect()
}

fn host(mode: &str, o: &HashMap<String, String>) -> Result<(), String> {
    if mode == "lifecycle" {
        return roles::host_lifecycle(&roles::LifecycleArgs {
            engine: get(o, "engine", None)?,
            node: get(o, "node", None)?,
            nodes: get(o, "nodes", None)?,
            cycles: get(o, "cycles", Some(10_000))?,
            check_every: get(o, "check-every", Some(1000))?,
            leak: get(o, "leak", Some(0))?,
            job: get(o, "job", None)?,
            epoch: get(o, "epoch", Some(16))?,
        });
    }
    let a = HostArgs {
        engine: get(o, "engine", None)?,
        node: get(o, "node", None)?,
        nodes: get(o, "nodes", None)?,
        sizes: list(o, "sizes", "2,1048576")?,
        counts: list(o, "counts", "1")?,
    };
    match mode {
        "verify" => roles::host_verify(&a),
        "bench" => roles::host_bench(&a),
        m => Err(format!("host mode {m:?}: expected verify, bench or lifecycle")),
    }
}

fn fabric(o: &HashMap<String, String>) -> Result<(), String> {
    let kind = match o.get("kind").map(String::as_str) {
        Some("dpdk") => Kind::Dpdk,
        Some("udp") => Kind::Udp,
        k => return Err(format!("--kind {k:?}: expected dpdk or udp")),
    };
    let a = FabricArgs {
        kind,
        node: get(o, "node", None)?,
        members: get(o, "members", None)?,
        vdev: get(o, "vdev", Some(String::new()))?,
        mode: get(o, "mode", Some("verify".to_string()))?,
        count: get(o, "count", Some(100))?,
        len: get(o, "len", Some(1000))?,
        job: get(o, "job", Some(format!("hw{}", std::process::id())))?,
    };
    roles::fabric_member(&a)
}

/// One fps measurement: node 0 floods `frames` multicast datagrams of `len` bytes.
struct Fps {
    offered: f64,
    delivered: f64,
    loss: f64,
}

fn measure_fps(lab: &Lab, net: Net, frames: u32, len: usize, job: &str) -> Result<Fps, String> {
    let tool = std::env::current_exe().map_err(|e| e.to_string())?;
    let n = lab.nodes.len();
    let (kind, members) = match net {
        Net::DpdkAfXdp | Net::DpdkMemif => ("dpdk", Lab::macs(n)),
        Net::Udp => ("udp", (0..n).map(|i| format!("{}:7470", Lab::ip(i))).collect::<Vec<_>>().join(",")),
        Net::Shm => return Err("frames per second are measured on lab fabrics (dpdk, udp), not shm".into()),
        Net::Verbs => return Err("the verbs fabric runs on an RDMA device, not in a namespace lab".into()),
    };
    let mut members_p: Vec<Child> = Vec::new();
    for i in 0..n {
        let mut cmd = lab.command(i, &tool);
        cmd.args(["fabric", "--kind", kind, "--node", &i.to_string(), "--members", &members])
            .args(["--vdev", &af_xdp_vdev(), "--mode", if i == 0 { "flood" } else { "sink" }])
            .args(["--count", &frames.to_string(), "--len", &len.to_string(), "--job", job]);
        members_p.push(Child::spawn(&format!("{kind} member {i}"), cmd)?);
    }
    proc::all(&mut members_p, |m| m.expect("READY", Duration::from_secs(30)))?;
    // Sinks first: they start counting, then the flood.
    for m in members_p.iter_mut().skip(1) {
        m.send("GO")?;
    }
    std::thread::sleep(Duration::from_millis(100));
    members_p[0].send("GO")?;
    let results = proc::all(&mut members_p, |m| m.expect("RESULT", Duration::from_secs(120)))?;
    proc::all(&mut members_p, |m| m.send("EXIT"))?;
    proc::all(&mut members_p, |m| m.expect("CLOSED", Duration::from_secs(30)))?;
    for m in members_p {
        let name = m.name.clone();
        let (status, err) = m.finish(Duration::from_secs(10));
        if !status.is_some_and(|s| s.success()) {
            return Err(format!("{name}: {status:?} {err}"));
        }
    }
    let field = |line: &str, k: &str| roles::field::<f64>(line, k).unwrap_or(0.0);
    let sent = field(&results[0], "sent");
    let offered = sent / (field(&results[0], "elapsed_ns") / 1e9).max(1e-9);
    let sinks = &results[1..];
    let delivered =
        sinks.iter().map(|r| field(r, "received") / (field(r, "span_ns") / 1e9).max(1e-9)).sum::<f64>()
            / sinks.len().max(1) as f64;
    let received = sinks.iter().map(|r| field(r, "received")).sum::<f64>() / sinks.len().max(1) as f64;
    Ok(Fps { offered, delivered, loss: 1.0 - received / sent.max(1.0) })
}

/// Per size: (rotating root ns, back-to-back ns), slowest rank.
fn measure_bcast(
    lab: &Lab,
    net: Net,
    sizes: &[usize],
    counts: &[u32],
    job: &str,
) -> Result<Vec<(usize, u128, u128)>, String> {
    let tool = std::env::current_exe().map_err(|e| e.to_string())?;
    let join = |v: Vec<String>| v.join(",");
    let args = vec![
        "bench".to_string(),
        "--sizes".to_string(),
        join(sizes.iter().map(|s| s.to_string()).collect()),
        "--counts".to_string(),
        join(counts.iter().map(|c| c.to_string()).collect()),
    ];
    let mut c = Cluster::start(Some(lab), lab.nodes.len(), net, job, &tool, &args)?;
    c.send_all("GO")?;
    let mut out = Vec::new();
    for &len in sizes {
        for phase in ["warm", "rot", "b2b", "check"] {
            c.barrier(&format!("{phase}-{len}"), Duration::from_secs(300))?;
        }
        let results = c.expect_all("RESULT", Duration::from_secs(300))?;
        let field = |line: &str, k: &str| roles::field::<u128>(line, k).unwrap_or(0);
        let rot = results.iter().map(|r| field(r, "rot_ns")).max().unwrap_or(0);
        let b2b = results.iter().map(|r| field(r, "b2b_ns")).max().unwrap_or(0);
        out.push((len, rot, b2b));
    }
    c.shut_down(Duration::from_secs(60))?;
    Ok(out)
}

/// Median, min and max of `v` (sorted in place).
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    match v {
        [] => (0.0, 0.0, 0.0),
        [one] => (*one, *one, *one),
        _ => (v[v.len() / 2], v[0], v[v.len() - 1]),
    }
}

fn bench(o: &HashMap<String, String>) -> Result<(), String> {
    if let Some(why) = env::af_xdp_unavailable() {
        println!("SKIP: {why}");
        return Ok(());
    }
    let nodes: usize = get(o, "nodes", Some(3))?;
    let frames: u32 = get(o, "frames", Some(100_000))?;
    let rounds: usize = get(o, "rounds", Some(3))?;
    let counts: Vec<u32> = list(o, "counts", "2000,50")?;
    let sizes = [2usize, 1 << 20];
    let lens = [64usize, 1472];
    let nets = [(Net::Udp, "udp"), (Net::DpdkAfXdp, "dpdk")];
    let lab = Lab::create("bench", nodes)?;
    let job = format!("hwb{}", std::process::id());
    println!(
        "ringcast-hw bench: {nodes} nodes on a Linux bridge (veth, one namespace each), {} CPUs, {rounds} rounds \
         (udp and dpdk alternate within each round); dpdk device {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        af_xdp_vdev()
    );
    // (fabric, len) -> delivered, offered, loss per round; (fabric, size) -> rot, b2b per round.
    let mut fps: HashMap<(&str, usize), Vec<Fps>> = HashMap::new();
    let mut lat: HashMap<(&str, usize), Vec<(f64, f64)>> = HashMap::new();
    for round in 0..rounds {
        for &len in &lens {
            for (net, name) in nets {
                let f = measure_fps(&lab, net, frames, len, &format!("{job}f"))?;
                fps.entry((name, len)).or_default().push(f);
            }
        }
        for (net, name) in nets {
            for (len, rot, b2b) in measure_bcast(&lab, net, &sizes, &counts, &format!("{job}{name}{round}"))?
            {
                lat.entry((name, len)).or_default().push((rot as f64 / 1e3, b2b as f64 / 1e3));
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    println!();
    println!(
        "frames per second: node 0 multicasts {frames} datagrams as fast as the fabric takes them; the others \
         count (mean over receivers); median [min-max] of {rounds} rounds"
    );
    println!("{:>6} {:>6} {:>26} {:>26} {:>8}", "fabric", "bytes", "offered fps", "delivered fps", "loss");
    for &len in &lens {
        for (_, name) in nets {
            let runs = fps.get(&(name, len)).map_or(&[][..], Vec::as_slice);
            let (o, o0, o1) = spread(&mut runs.iter().map(|f| f.offered).collect::<Vec<_>>());
            let (d, d0, d1) = spread(&mut runs.iter().map(|f| f.delivered).collect::<Vec<_>>());
            let (l, _, _) = spread(&mut runs.iter().map(|f| f.loss * 100.0).collect::<Vec<_>>());
            println!(
                "{name:>6} {len:>6} {:>26} {:>26} {l:>7.1}%",
                format!("{o:.0} [{o0:.0}-{o1:.0}]"),
                format!("{d:.0} [{d0:.0}-{d1:.0}]")
            );
        }
    }
    println!();
    println!(
        "broadcast latency through {nodes} engines + {nodes} hosts, µs per broadcast at the slowest rank \
         (rotating root: root k posts -> root k+1 completes; back to back: from root 0, osu_bcast's loop); \
         counts {counts:?}; median [min-max] of {rounds} rounds"
    );
    println!("{:>6} {:>9} {:>24} {:>24}", "fabric", "bytes", "rotating µs", "back-to-back µs");
    for &len in &sizes {
        for (_, name) in nets {
            let runs = lat.get(&(name, len)).map_or(&[][..], Vec::as_slice);
            let (r, r0, r1) = spread(&mut runs.iter().map(|x| x.0).collect::<Vec<_>>());
            let (b, b0, b1) = spread(&mut runs.iter().map(|x| x.1).collect::<Vec<_>>());
            println!(
                "{name:>6} {len:>9} {:>24} {:>24}",
                format!("{r:.1} [{r0:.1}-{r1:.1}]"),
                format!("{b:.1} [{b0:.1}-{b1:.1}]")
            );
        }
    }
    println!();
    let median = |v: Vec<f64>| spread(&mut v.clone()).0;
    for &len in &lens {
        let d =
            |n: &str| median(fps.get(&(n, len)).map_or(vec![], |r| r.iter().map(|f| f.delivered).collect()));
        println!("ratio dpdk/udp delivered fps at {len} B: {:.2}", d("dpdk") / d("udp").max(1.0));
    }
    for &len in &sizes {
        let m = |n: &str, i: usize| {
            median(
                lat.get(&(n, len))
                    .map_or(vec![], |r| r.iter().map(|x| if i == 0 { x.0 } else { x.1 }).collect()),
            )
        };
        println!(
            "ratio dpdk/udp latency at {len} B: rotating {:.2}, back to back {:.2}",
            m("dpdk", 0) / m("udp", 0).max(1e-9),
            m("dpdk", 1) / m("udp", 1).max(1e-9)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("host") => match args.get(1) {
            Some(mode) => options(&args[2..]).and_then(|o| host(mode, &o)),
            None => Err("host verify|bench ...".into()),
        },
        Some("fabric") => options(&args[1..]).and_then(|o| fabric(&o)),
        Some("bench") => options(&args[1..]).and_then(|o| bench(&o)),
        _ => Err(
            "usage: ringcast-hw host verify|bench ... | fabric ... | bench [--nodes N] [--frames N] [--counts A,B] [--rounds N]"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            roles::say(&format!("FAIL {e}"));
            ExitCode::FAILURE
        }
    }
}
