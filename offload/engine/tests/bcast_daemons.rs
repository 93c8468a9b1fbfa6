//! BCAST across real processes: one `ringcast-engine` daemon per emulated node on the
//! shared-memory fabric (DPU-emulation mode), a host attached to each. Every byte is checked at
//! every rank; then one engine is SIGKILLed and the survivors get a typed error within bounded
//! time — nothing hangs — and nothing of the job is left in `/dev/shm`.
mod common;

use common::{unique_name, Daemon};
use ringcast_abi::StatusKind;
use ringcast_host::{Access, Error, Host, SharedBuf};
use ringcast_offload::fabric::shm::cleanup;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const NODES: u32 = 3;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 3) as u8).collect()
}

fn start(job: &str) -> Vec<Daemon> {
    (0..NODES)
        .map(|node| {
            Daemon::start_with(
                &format!("{job}-{node}"),
                &[
                    ("RINGCAST_FABRIC", "shm".into()),
                    ("RINGCAST_JOB", job.into()),
                    ("RINGCAST_NODES", NODES.to_string()),
                    ("RINGCAST_NODE", node.to_string()),
                    ("RINGCAST_PEER_TIMEOUT_MS", "500".into()),
                    ("RINGCAST_CHANNELS", "4".into()),
                    ("RINGCAST_LOG_LEVEL", "0".into()),
                ],
            )
        })
        .collect()
}

fn left_in_dev_shm(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.contains(job))
        .collect()
}

#[test]
fn daemons_broadcast_byte_exact_and_survive_a_killed_engine() {
    let job = unique_name("bcastd").replace("test-", "");
    let mut daemons = start(&job);
    let ready = Arc::new(Barrier::new(NODES as usize + 1));
    let killed = Arc::new(Barrier::new(NODES as usize));
    let mut threads = Vec::new();
    for node in 0..NODES {
        let (name, ready, killed) = (format!("{job}-{node}"), ready.clone(), killed.clone());
        threads.push(std::thread::spawn(move || -> Result<Option<StatusKind>, String> {
            let mut host = Host::attach(&name).map_err(|e| e.to_string())?;
            let buf = SharedBuf::new(1 << 20).map_err(|e| e.to_string())?;
            let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
            ready.wait();
            for k in 0..24u64 {
                let len = [2usize, 1500, 65_536, 1 << 20][k as usize % 4];
                let root = (k % NODES as u64) as u32;
                let want = pattern(k, len);
                buf.write_at(0, &if node == root { want.clone() } else { vec![0; len] })
                    .map_err(|e| e.to_string())?;
                host.bcast(0, root, region.at(0), len as u64)
                    .map_err(|e| format!("node {node} bcast {k}: {e}"))?;
                let mut got = vec![0; len];
                buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
                if got != want {
                    return Err(format!("node {node} bcast {k}: wrong bytes"));
                }
            }
            killed.wait(); // node 2's engine dies now (the main thread kills it)
            if node == NODES - 1 {
                return Ok(None);
            }
            // The survivors keep broadcasting from node 0: within the channels and the peer
            // timeout, each learns that a member is gone — a typed error, never a hang.
            let start = Instant::now();
            for k in 0..64u64 {
                match host.bcast(0, 0, region.at(0), 64) {
                    Ok(_) => {}
                    Err(Error::Op { status, .. }) => {
                        let kind = StatusKind::try_from(status).map_err(|_| "unknown status".to_string())?;
                        return Ok(Some(kind));
                    }
                    Err(e) => return Err(format!("node {node} after the kill, bcast {k}: {e}")),
                }
                if start.elapsed() > Duration::from_secs(20) {
                    break;
                }
            }
            Err(format!("node {node}: no error after a member died"))
        }));
    }
    ready.wait();
    // Node 2's host returns once all hosts passed the `killed` barrier; then its engine dies
    // (SIGKILL: no goodbye on the fabric) while nodes 0 and 1 keep broadcasting.
    let mut victim = daemons.pop().expect("three daemons");
    let node2 = threads.pop().expect("node 2's host");
    let mut results = vec![node2.join().expect("node 2's host thread")];
    let _ = victim.child.kill();
    let _ = victim.child.wait();
    for t in threads {
        results.push(t.join().expect("host thread"));
    }
    for r in &results {
        match r {
            Ok(None) => {}
            Ok(Some(kind)) => assert!(
                matches!(kind, StatusKind::CommunicatorBroken | StatusKind::PeerUnreachable),
                "unexpected error after the kill: {kind:?}"
            ),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(results.iter().filter(|r| matches!(r, Ok(Some(_)))).count() == 2, "{results:?}");
    for d in daemons {
        assert!(d.stop(), "a surviving engine did not stop cleanly");
    }
    let _ = cleanup(&job);
    assert!(left_in_dev_shm(&job).is_empty(), "{:?}", left_in_dev_shm(&job));
}
