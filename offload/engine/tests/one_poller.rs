//! One poller per process in thread mode (issue 15): while a host of the process waits, it runs
//! the engine's loop itself and the engine thread parks — the two never spin side by side. The
//! test samples the scheduler state of both threads (`/proc/self/task/*/stat`) while the host
//! waits on COPYs long enough to be seen, with the host's back-off set never to sleep (so the
//! old behaviour, a host spinning beside a busy engine thread, would show on every sample). It
//! runs alone in its binary: no other test's threads to tell apart.
mod common;
use common::engine_tid;
use ringcast_host::{Access, Config, Host, SharedBuf, SubmissionDescriptor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Scheduler state letter of thread `tid` of this process (`R` running or runnable).
fn state(tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // After the command name in parentheses: " S ..." — the name may itself hold spaces.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

#[test]
fn a_waiting_host_and_its_engine_thread_do_not_both_run() {
    let config = Config::default().with(|c| {
        // Never sleep while waiting: spin and yield only, as a latency-bound host would.
        c.runner.idle_spins = u32::MAX;
        c.runner.idle_yields = u32::MAX;
        c.runner.poll_mode = "spin-yield".parse().unwrap();
    });
    let mut host = Host::spawn_local(config).expect("thread-mode engine");
    const LEN: usize = 64 << 20;
    let src = SharedBuf::new(LEN).unwrap();
    let dst = SharedBuf::new(LEN).unwrap();
    src.write_at(0, &vec![0x5a; LEN]).unwrap();
    let rs = host.register(&src, Access::READ).unwrap();
    let rd = host.register(&dst, Access::READ_WRITE).unwrap();

    let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    let engine = engine_tid();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut samples, mut both) = (0u32, 0u32);
            while !done.load(Ordering::Relaxed) {
                if let (Some(h), Some(e)) = (state(me), state(engine)) {
                    samples += 1;
                    both += u32::from(h == 'R' && e == 'R');
                }
                std::thread::sleep(Duration::from_micros(300));
            }
            (samples, both)
        })
    };
    for i in 0..40u64 {
        host.post(&SubmissionDescriptor::copy(i, rd.at(0), rs.at(0), LEN as u64)).unwrap();
        let c = host.wait().unwrap();
        assert!(c.status.is_ok(), "copy {i}: {c:?}");
    }
    done.store(true, Ordering::Relaxed);
    let (samples, both) = sampler.join().unwrap();
    let mut probe = vec![0u8; 4096];
    dst.read_at((LEN - 4096) as u64, &mut probe).unwrap();
    assert!(probe.iter().all(|&b| b == 0x5a), "the copies arrived");
    eprintln!("{samples} samples, host and engine thread both running in {both}");
    assert!(samples >= 50, "too few samples ({samples}) to judge");
    assert!(
        both * 5 <= samples,
        "host and engine thread both running in {both} of {samples} samples: two pollers in one process"
    );
}
