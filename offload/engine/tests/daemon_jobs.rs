//! Engine daemons serving job after job (issue 38, item 8): three `ringcast-engine` daemons on
//! the shared-memory fabric; the first job's process at node 1 (a child process) is SIGKILLed
//! mid-job, the survivors' next broadcasts end typed and they leave; then a second job's
//! processes attach to the same daemons and broadcast byte-exact, on a world of their own.
//! Before, the daemons kept the failed job's world — broken, under one key and one sequence —
//! and every later job failed (`CommunicatorBroken`) until they were restarted.
mod common;

use common::{spawn_child, unique_name, wait_with_timeout, Daemon, ENGINE, ROLE};
use ringcast_host::{Access, Error, Host, SharedBuf};
use ringcast_offload::fabric::shm::cleanup;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const NODES: u32 = 3;
const LEN: usize = 4096;
const CHILD_TEST: &str = "host_process_role";

fn pattern(seed: u64) -> Vec<u8> {
    (0..LEN).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 3) as u8).collect()
}

/// Entry point of the child host: the first job's process at node 1, which receives broadcasts
/// from node 0 until it is killed.
#[test]
fn host_process_role() {
    if std::env::var(ROLE).as_deref() != Ok("receive-until-killed") {
        return;
    }
    let engine = std::env::var(ENGINE).unwrap();
    let mut host = Host::attach(&engine).expect("attach");
    let buf = SharedBuf::new(LEN).unwrap();
    let region = host.register(&buf, Access::READ_WRITE).unwrap();
    for _ in 0..3 {
        host.bcast(0, 0, region.at(0), LEN as u64).expect("job 1 broadcast");
    }
    // Killed here, in the middle of the job.
    std::thread::sleep(Duration::from_secs(120));
}

/// A host per node in `nodes` (threads of this process) broadcasting `count` times from node 0,
/// each checked byte for byte; after `before_end` the survivors keep broadcasting until one
/// fails typed (the failed job) when `expect_failure`.
fn job(
    names: &[String],
    nodes: &[u32],
    seeds: std::ops::Range<u64>,
    expect_failure: Option<Arc<Barrier>>,
) -> Vec<Result<(), String>> {
    let threads: Vec<_> = nodes
        .iter()
        .map(|&node| {
            let (name, seeds, after) = (names[node as usize].clone(), seeds.clone(), expect_failure.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut host = Host::attach(&name).map_err(|e| e.to_string())?;
                let buf = SharedBuf::new(LEN).map_err(|e| e.to_string())?;
                let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
                for k in seeds {
                    let want = pattern(k);
                    buf.write_at(0, &if node == 0 { want.clone() } else { vec![0; LEN] })
                        .map_err(|e| e.to_string())?;
                    host.bcast(0, 0, region.at(0), LEN as u64)
                        .map_err(|e| format!("node {node} bcast {k}: {e}"))?;
                    let mut got = vec![0; LEN];
                    buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
                    if got != want {
                        return Err(format!("node {node} bcast {k}: wrong bytes"));
                    }
                }
                let Some(after) = after else { return Ok(()) };
                after.wait(); // node 1's process is killed now
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(20) {
                    match host.bcast(0, 0, region.at(0), LEN as u64) {
                        Ok(_) => {}
                        Err(Error::Op { .. }) => return Ok(()),
                        Err(e) => return Err(format!("node {node} after the kill: {e}")),
                    }
                }
                Err(format!("node {node}: no error after a member died"))
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err("host thread panicked".into()))).collect()
}

#[test]
fn daemons_run_the_next_job_after_a_failed_one_without_a_restart() {
    let job_name = unique_name("jobs").replace("test-", "");
    let daemons: Vec<Daemon> = (0..NODES)
        .map(|node| {
            Daemon::start_with(
                &format!("{job_name}-{node}"),
                &[
                    ("RINGCAST_FABRIC", "shm".into()),
                    ("RINGCAST_JOB", job_name.clone()),
                    ("RINGCAST_NODES", NODES.to_string()),
                    ("RINGCAST_NODE", node.to_string()),
                    ("RINGCAST_PEER_TIMEOUT_MS", "500".into()),
                    ("RINGCAST_CHANNELS", "4".into()),
                    ("RINGCAST_LOG_LEVEL", "0".into()),
                ],
            )
        })
        .collect();
    let names: Vec<String> = daemons.iter().map(|d| d.name.clone()).collect();
    // Job 1: node 1's process is a child, killed after three broadcasts.
    let mut child = spawn_child(CHILD_TEST, "receive-until-killed", &names[1]);
    let killed = Arc::new(Barrier::new(3));
    let survivors = {
        let (names, killed) = (names.clone(), killed.clone());
        std::thread::spawn(move || job(&names, &[0, 2], 0..3, Some(killed)))
    };
    killed.wait();
    let _ = child.kill();
    assert!(wait_with_timeout(&mut child, Duration::from_secs(10)).is_some(), "the child did not die");
    for r in survivors.join().unwrap() {
        r.unwrap_or_else(|e| panic!("job 1: {e}"));
    }
    // Job 2 on the same daemons, every node in this process.
    for r in job(&names, &[0, 1, 2], 100..106, None) {
        r.unwrap_or_else(|e| panic!("job 2 after a failed job: {e}"));
    }
    // And job 3 after a job that ended well.
    for r in job(&names, &[0, 1, 2], 200..203, None) {
        r.unwrap_or_else(|e| panic!("job 3: {e}"));
    }
    for d in daemons {
        assert!(d.stop(), "an engine did not stop cleanly");
    }
    let _ = cleanup(&job_name);
}
