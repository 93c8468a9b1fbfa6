//! BCAST between two `ringcast-engine` daemons on the `udp` fabric (loopback), a host attached
//! to each, while the receiving engine waits on its sockets: its host's broadcast is in flight
//! and the root's host posts late, so the engine — back-off set to sleep at once — sleeps on
//! the fabric (`Fabric::wait`, `runner/engine_loop.rs` `wait_on_fabric`) through several of
//! its 200 µs waits. Every byte is checked at both ranks, and the engines' exit lines say that
//! the receiving engine did wait on the fabric.
mod common;

use common::{unique_name, Daemon};
use ringcast_host::{Access, Host, SharedBuf};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(131).wrapping_add(i as u64 * 11) >> 2) as u8).collect()
}

#[test]
fn a_receiver_waiting_on_its_sockets_for_a_late_root_gets_every_byte() {
    let job = unique_name("bcastu").replace("test-", "");
    // NOTE(unwrap): the loopback address always accepts a bind to port 0.
    let ports: Vec<SocketAddr> =
        (0..2).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()).collect();
    let members = ports.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
    let dir = std::env::temp_dir();
    let logs: Vec<std::path::PathBuf> = (0..2).map(|n| dir.join(format!("{job}-{n}.log"))).collect();
    let daemons: Vec<Daemon> = (0..2u32)
        .map(|node| {
            Daemon::start_with(
                &format!("{job}-{node}"),
                &[
                    ("RINGCAST_FABRIC", "udp".into()),
                    ("RINGCAST_UDP_MEMBERS", members.clone()),
                    ("RINGCAST_JOB", job.clone()),
                    ("RINGCAST_JOB_SECRET", "00112233445566778899aabbccddeeff".repeat(2)),
                    ("RINGCAST_NODES", "2".into()),
                    ("RINGCAST_NODE", node.to_string()),
                    // Straight to the sleeping stage after an empty pass.
                    ("RINGCAST_IDLE_SPINS", "0".into()),
                    ("RINGCAST_IDLE_YIELDS", "0".into()),
                    ("RINGCAST_LOG_LEVEL", "2".into()),
                    ("RINGCAST_LOG_FILE", logs[node as usize].display().to_string()),
                ],
            )
        })
        .collect();
    let posted = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2u32)
        .map(|node| {
            let (name, posted) = (format!("{job}-{node}"), posted.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut host = Host::attach(&name).map_err(|e| e.to_string())?;
                let buf = SharedBuf::new(1 << 20).map_err(|e| e.to_string())?;
                let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
                for k in 0..6u64 {
                    let len = [2usize, 65_536, 1 << 20][k as usize % 3];
                    let want = pattern(k, len);
                    buf.write_at(0, &if node == 0 { want.clone() } else { vec![0; len] })
                        .map_err(|e| e.to_string())?;
                    posted.wait();
                    if node == 0 {
                        // The receiver's broadcast is in flight meanwhile: its engine waits
                        // on the fabric, 200 µs at a time.
                        std::thread::sleep(Duration::from_millis(5 + 5 * k));
                    }
                    host.bcast(0, 0, region.at(0), len as u64)
                        .map_err(|e| format!("node {node} bcast {k}: {e}"))?;
                    let mut got = vec![0; len];
                    buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
                    if got != want {
                        return Err(format!("node {node} bcast {k} of {len} bytes: wrong bytes"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("host thread").expect("broadcasts");
    }
    for d in daemons {
        assert!(d.stop(), "an engine did not stop cleanly");
    }
    let text: Vec<String> = logs.iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect();
    for p in &logs {
        let _ = std::fs::remove_file(p);
    }
    let fabric_waits = |log: &str| -> Option<u64> {
        log.lines()
            .find_map(|l| l.split("on the fabric ").nth(1))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    let waits =
        fabric_waits(&text[1]).unwrap_or_else(|| panic!("no exit line in the receiver's log:\n{}", text[1]));
    println!("the receiving engine: {}", text[1].lines().find(|l| l.contains("on the fabric")).unwrap_or(""));
    // Six late roots of 5 to 30 ms: well over a hundred 200 µs waits, however the host and
    // the scheduler share the time; a dozen leaves room for a loaded machine.
    assert!(waits >= 12, "the receiving engine waited on the fabric {waits} times:\n{}", text[1]);
}
