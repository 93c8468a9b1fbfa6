//! NOP round-trip latency host → engine → host, in both runner modes, measured in one run:
//! `thread` (the engine polls in a pinned thread of this process) and `daemon` (the engine is a
//! separate `ringcast engine` process attached through the shared-memory rings). Also the cost
//! of a batch of 32 NOPs behind one doorbell, to show what batching buys per descriptor.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ringcast_host::{Config, Error, Host, SubmissionDescriptor};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_daemon(name: &str) -> (Daemon, Host) {
    let child = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["engine", "--name", name])
        .env("RINGCAST_LOG_LEVEL", "0")
        .stdin(Stdio::null())
        .spawn()
        .expect("start ringcast engine");
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

criterion_group!(benches, nop_round_trip);
criterion_main!(benches);
