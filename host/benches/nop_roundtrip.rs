//! NOP round-trip latency host → engine → host, in both runner modes, measured in one run:
//! `thread` (the engine polls in a pinned thread of this process) and `daemon` (the engine is a
//! separate process attached through the shared-memory rings: this bench binary re-executed,
//! running the same daemon as `ringcast engine`, so the bench needs no other binary). Also the
//! cost of a batch of 32 NOPs behind one doorbell, to show what batching buys per descriptor.
//!
//! And what the BlueField contract costs (issue 16): the daemon reached by the `mapped` DMA
//! backend (rings and buffers shared), by `cma` (host-owned rings and buffers reached with
//! `process_vm_readv`/`writev`, nothing mapped) over the Unix socket, and by `cma` over TCP
//! (the DPU emulation's path) — per descriptor (NOPs, alone and in batches of 32) and per byte
//! (engine-side COPYs of 1 MiB between two registered buffers).
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
    start_daemon_with(name, name, &[], &Config::from_env().unwrap())
}

/// Starts the daemon `name` with `env` and attaches to `attach` (its name, or its TCP address)
/// with `host` as the host's configuration.
fn start_daemon_with(name: &str, attach: &str, env: &[(&str, String)], host: &Config) -> (Daemon, Host) {
    let exe = std::env::current_exe().expect("the bench's own path");
    let child = Command::new(exe)
        .env(ENGINE_ROLE, name)
        .env("RINGCAST_LOG_LEVEL", "0")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .spawn()
        .expect("start the engine daemon");
    let d = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Host::attach_config(attach, host, Default::default()) {
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

/// A fixture secret for the TCP daemon (the bench's own job).
const SECRET: &str = "0be4c4c0ffee0be4c4c0ffee0be4c4c0ffee0be4c4c0ffee0be4c4c0ffee0001";

/// The daemon by each DMA backend: per descriptor (NOPs) and per byte (1 MiB COPYs).
fn dma_backends(c: &mut Criterion) {
    let base = Config::from_env().unwrap();
    let cma = base.clone().with(|c| c.runner.dma = ringcast_offload::config::DmaMode::Cma);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tcp_host = cma.clone().with(|c| c.topology.job_secret = SECRET.parse().unwrap());
    let tcp_env =
        [("RINGCAST_LISTEN_TCP", format!("127.0.0.1:{port}")), ("RINGCAST_JOB_SECRET", SECRET.to_string())];
    let tcp_addr = format!("tcp://127.0.0.1:{port}");
    /// Label, TCP address (else the daemon's name), the daemon's extra environment, the host's
    /// configuration.
    type Case<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, String)], &'a Config);
    let cases: [Case; 3] = [
        ("mapped", None, &[], &base),
        ("cma", None, &[], &cma),
        ("cma_tcp", Some(&tcp_addr), &tcp_env, &tcp_host),
    ];
    const LEN: usize = 1 << 20;
    let mut descs = vec![SubmissionDescriptor::nop(0); 32];
    let mut g = c.benchmark_group("dma_backend");
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    for (label, addr, env, host_config) in cases {
        let name = format!("bench-{label}-{}", std::process::id());
        let (_daemon, mut host) = start_daemon_with(&name, addr.unwrap_or(&name), env, host_config);
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("nop/{label}"), |b| b.iter(|| host.nop().unwrap()));
        g.throughput(Throughput::Elements(32));
        g.bench_function(format!("nop_batch32/{label}"), |b| b.iter(|| batch(&mut host, &mut descs)));
        let src = ringcast_host::SharedBuf::new(LEN).unwrap();
        let dst = ringcast_host::SharedBuf::new(LEN).unwrap();
        src.fill(0, LEN, 0x5a).unwrap();
        let rs = host.register(&src, ringcast_host::Access::READ).unwrap();
        let rd = host.register(&dst, ringcast_host::Access::READ_WRITE).unwrap();
        host.copy(rd.at(0), rs.at(0), LEN as u64).unwrap();
        let mut check = vec![0u8; LEN];
        dst.read_at(0, &mut check).unwrap();
        assert!(check.iter().all(|&b| b == 0x5a), "{label}: the copy delivered wrong bytes");
        g.throughput(Throughput::Bytes(LEN as u64));
        g.bench_function(format!("copy_1MiB/{label}"), |b| {
            b.iter(|| host.copy(rd.at(0), rs.at(0), LEN as u64).unwrap())
        });
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

criterion_group!(benches, nop_round_trip, dma_backends);

/// `criterion_main!`, but the re-executed binary runs the engine daemon instead.
fn main() -> ExitCode {
    if let Ok(name) = std::env::var(ENGINE_ROLE) {
        return run_engine(name);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    ExitCode::SUCCESS
}
