//! NOP round-trip latency host → engine → host, in both runner modes, measured in one run:
//! `thread` (the engine polls in a pinned thread of this process) and `daemon` (the engine is a
//! separate process attached through the shared-memory rings: this bench binary re-executed,
//! running the same daemon as `ringcast engine`, so the bench needs no other binary). Also the
//! cost of a batch of 32 NOPs behind one doorbell, to show what batching buys per descriptor.
use criterion::{criterion_group, Criterion, Throughput};
use ringcast_host::{Config, Error, Host, SubmissionDescriptor};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Set (to the engine's name) in the re-executed bench binary that runs the daemon.
const ENGINE_ROLE: &str = "RINGCAST_BENCH_ENGINE";

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(name: &str) -> (Daemon, Host) {
    let exe = std::env::current_exe().expect("the bench's own path");
    let child = Command::new(exe)
        .env(ENGINE_ROLE, name)
        .env("RINGCAST_LOG_LEVEL", "0")
        .stdin(Stdio::null())
        .spawn()
        .expect("start the engine daemon");
    let d = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Host::attach(name) {
            Ok(h) => return (d, h),
            Err(Error::Connect { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("engine did not come up: {e}"),
        }
    }
}

fn batch(host: &mut Host, descs: &mut [SubmissionDescriptor]) {
    for d in descs.iter_mut() {
        d.cookie = host.next_cookie();
    }
    let mut posted = 0;
    let mut done = 0;
    while done < descs.len() {
        posted += host.post_batch(&descs[posted..]);
        while host.poll().unwrap().is_some() {
            done += 1;
        }
    }
}

/// One engine at a time: on a 2-core machine two polling engines would compete for a CPU.
fn nop_round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("nop_round_trip");
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    let mut descs = vec![SubmissionDescriptor::nop(0); 32];
    {
        let mut host = Host::spawn_local(Config::from_env().unwrap()).unwrap();
        g.bench_function("thread", |b| b.iter(|| host.nop().unwrap()));
        g.throughput(Throughput::Elements(32));
        g.bench_function("thread_batch32", |b| b.iter(|| batch(&mut host, &mut descs)));
    }
    {
        let name = format!("bench-{}", std::process::id());
        let (_daemon, mut host) = start_daemon(&name);
        g.throughput(Throughput::Elements(1));
        g.bench_function("daemon", |b| b.iter(|| host.nop().unwrap()));
        g.throughput(Throughput::Elements(32));
        g.bench_function("daemon_batch32", |b| b.iter(|| batch(&mut host, &mut descs)));
    }
    g.finish();
}

/// The engine daemon of [`start_daemon`], in the re-executed bench binary (as `ringcast engine`).
fn run_engine(name: String) -> ExitCode {
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nop_roundtrip engine: {e}");
            return ExitCode::from(2);
        }
    };
    config.runner.engine_name = name;
    if let Err(e) = config.validate() {
        eprintln!("nop_roundtrip engine: {e}");
        return ExitCode::from(2);
    }
    match ringcast_offload::runner::run_daemon(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nop_roundtrip engine: {e}");
            ExitCode::FAILURE
        }
    }
}

criterion_group!(benches, nop_round_trip);

/// `criterion_main!`, but the re-executed binary runs the engine daemon instead.
fn main() -> ExitCode {
    if let Ok(name) = std::env::var(ENGINE_ROLE) {
        return run_engine(name);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    ExitCode::SUCCESS
}
