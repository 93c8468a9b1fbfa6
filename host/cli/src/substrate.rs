//! `ringcast substrate-demo`: the offload substrate (rings, registration, COPY) end to end, on real
//! processes and real shared memory.
//!
//! 1. starts a `ringcast engine` daemon (DPU-emulation mode) under a private name;
//! 2. starts host processes that attach, register shared memory, run thousands of byte-verified
//!    COPYs, every bad-descriptor case, and NOP round trips;
//! 3. starts a host that dies with work in flight, and checks the engine reclaimed it while the
//!    others kept being served;
//! 4. measures NOP round trips and COPY bandwidth from this process in daemon mode and against
//!    an in-process polling-thread engine;
//! 5. stops the daemon and checks nothing is left behind.
//!
//! Exits non-zero if any byte or status was wrong.
use clap::Args;
use ringcast_host::selftest::{copy_and_errors, copy_bandwidth, nop_round_trips, quantile};
use ringcast_host::{Access, Config, Error, Host, SharedBuf, SubmissionDescriptor};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// `ringcast demo` options (defaults are the main job).
#[derive(Args)]
pub struct DemoArgs {
    /// Host processes attached to the daemon at once.
    #[arg(long, default_value_t = 2)]
    hosts: u32,
    /// Verified COPYs per host process.
    #[arg(long, default_value_t = 2000)]
    copies: usize,
    /// NOP round trips per measurement.
    #[arg(long, default_value_t = 20000)]
    nops: usize,
}

/// `ringcast demo-host` options.
#[derive(Args)]
pub struct HostArgs {
    #[arg(long)]
    engine: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 1000)]
    copies: usize,
    #[arg(long, default_value_t = 1000)]
    nops: usize,
    /// Post large COPYs and abort without waiting (the host-death case).
    #[arg(long)]
    die_in_flight: bool,
}

/// A demo host process: self-test, then one summary line on stdout.
pub fn host(a: HostArgs) -> ExitCode {
    let mut host = match Host::attach(&a.engine) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("demo host: {e}");
            return ExitCode::FAILURE;
        }
    };
    if a.die_in_flight {
        return die_in_flight(&mut host);
    }
    let t = Instant::now();
    let result = copy_and_errors(&mut host, a.seed, a.copies)
        .and_then(|r| Ok((r, nop_round_trips(&mut host, a.nops)?)));
    match result {
        Ok((r, lat)) => {
            println!(
                "ok pid={} copies={} bytes={} batch={} bad_cases={} nop_p50_ns={} nop_p99_ns={} secs={:.2}",
                std::process::id(),
                r.copies,
                r.bytes,
                r.batch,
                r.bad_cases.len(),
                quantile(&lat, 0.5),
                quantile(&lat, 0.99),
                t.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAILED pid={} {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

fn die_in_flight(host: &mut Host) -> ExitCode {
    const BIG: usize = 16 << 20;
    let bufs = (SharedBuf::new(BIG), SharedBuf::new(BIG));
    let (Ok(src), Ok(dst)) = bufs else {
        return ExitCode::FAILURE;
    };
    let (Ok(rs), Ok(rd)) = (host.register(&src, Access::READ), host.register(&dst, Access::READ_WRITE))
    else {
        return ExitCode::FAILURE;
    };
    let descs: Vec<_> = (1..=host.ring_entries() as u64)
        .map(|i| SubmissionDescriptor::copy(i, rd.at(0), rs.at(0), BIG as u64))
        .collect();
    let n = host.post_batch(&descs);
    println!("posted={n}");
    std::process::abort();
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ringcast demo: FAILED: {msg}");
    ExitCode::FAILURE
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let name = format!("demo-{}", std::process::id());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("ringcast demo — offload substrate end to end ({cpus} CPUs)");
    println!("engine daemon @ringcast.{name}; {} host processes × {} verified COPYs; {} NOP round trips per figure\n", a.hosts, a.copies, a.nops);

    let daemon = match Command::new(&exe)
        .args(["engine", "--name", &name])
        .env("RINGCAST_LOG_LEVEL", "1")
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(c) => Daemon(c),
        Err(e) => return fail(format!("cannot start the engine daemon: {e}")),
    };
    let mut me = match Host::attach_wait(&name, Duration::from_secs(20)) {
        Ok(h) => h,
        Err(e) => return fail(format!("engine did not come up: {e}")),
    };

    // Host processes in parallel with a host that dies holding work.
    let spawn = |extra: &[String]| {
        Command::new(&exe)
            .arg("demo-host")
            .args(["--engine", &name])
            .args(extra)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
    };
    let t = Instant::now();
    let mut kids = Vec::new();
    for i in 0..a.hosts {
        let args = [
            format!("--seed={}", 1000 + i),
            format!("--copies={}", a.copies),
            format!("--nops={}", a.nops / 4),
        ];
        match spawn(&args) {
            Ok(c) => kids.push(c),
            Err(e) => return fail(e),
        }
    }
    let dying = match spawn(&["--die-in-flight".to_string()]) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut all_ok = true;
    println!("host processes (daemon mode):");
    for k in kids {
        match k.wait_with_output() {
            Ok(out) => {
                let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
                all_ok &= out.status.success() && line.starts_with("ok ");
                println!("  {line}");
            }
            Err(e) => return fail(e),
        }
    }
    let dying_out = match dying.wait_with_output() {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    println!(
        "  host that aborted with work in flight: {} ({})",
        String::from_utf8_lossy(&dying_out.stdout).trim(),
        dying_out.status
    );
    println!("  wall time {:.1} s", t.elapsed().as_secs_f64());
    if !all_ok {
        return fail("a host process saw a wrong byte or status");
    }

    // The engine noticed the death and still serves.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        match me.stats() {
            Ok(s) if s.hosts_lost >= 1 => break s,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(s) => return fail(format!("engine never reclaimed the dead host: {s:?}")),
            Err(e) => return fail(e),
        }
    };
    println!(
        "  engine reclaimed the dead host: {} descriptors dropped in flight, its memory unmapped; {} hosts still attached\n",
        stats.dropped_in_flight, stats.hosts_attached
    );

    // Measurements from this process: daemon mode, then thread mode.
    let mut thread_host = match Host::spawn_local(Config::from_env().unwrap_or_default()) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    println!("{:<38} {:>14} {:>14}", "measurement", "daemon mode", "thread mode");
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut lat = Vec::new();
    for h in [&mut me, &mut thread_host] {
        match nop_round_trips(h, a.nops) {
            Ok(l) => lat.push(l),
            Err(e) => return fail(e),
        }
    }
    rows.push(("NOP round trip p50 (µs)".into(), us(quantile(&lat[0], 0.5)), us(quantile(&lat[1], 0.5))));
    rows.push(("NOP round trip p99 (µs)".into(), us(quantile(&lat[0], 0.99)), us(quantile(&lat[1], 0.99))));
    for size in [4 << 10, 64 << 10, 1 << 20] {
        let mut bw = Vec::new();
        for h in [&mut me, &mut thread_host] {
            match copy_bandwidth(h, size, 256 << 20) {
                Ok(b) => bw.push(b),
                Err(e) => return fail(e),
            }
        }
        rows.push((
            format!("COPY {} KiB, ring full (GB/s)", size >> 10),
            format!("{:.2}", bw[0] / 1e9),
            format!("{:.2}", bw[1] / 1e9),
        ));
    }
    for (m, d, t) in rows {
        println!("{m:<38} {d:>14} {t:>14}");
    }

    let final_stats = match me.stats() {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    drop(me);
    drop(thread_host);
    let pid = rustix::process::Pid::from_child(&daemon.0);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let mut daemon = daemon;
    let clean = matches!(daemon.0.wait(), Ok(s) if s.success());
    let gone = matches!(Host::attach(&name), Err(Error::Connect { .. }));
    println!(
        "\nengine totals: {} descriptors ok, {} failed with a typed status (all expected), {} dropped from the dead host, {} hosts lost",
        final_stats.completed_ok, final_stats.completed_err, final_stats.dropped_in_flight, final_stats.hosts_lost
    );
    println!("daemon stopped cleanly: {clean}; engine name released: {gone}");
    if !(clean && gone) {
        return fail("daemon shutdown");
    }
    println!("\nringcast demo: PASSED — every byte verified, every bad input answered with its typed error");
    ExitCode::SUCCESS
}
