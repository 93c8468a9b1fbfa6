//! The `rdma` backend against the fake NIC: jobs in range move through the link's buffer in
//! pieces, jobs out of range are refused before anything is posted, and a failed or missing
//! completion faults the link for good.
use super::fake::{FakeNic, NicState, FLUSH, REMOTE_ACCESS};
use super::{LinkFault, RdmaLink};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RKEY: u32 = 0x00ab_cdef;

/// A link whose host exposed `mem` (registered on the fake NIC under [`RKEY`]).
fn link_over(mem: &[u8], buffer: usize) -> (RdmaLink, Arc<Mutex<NicState>>) {
    let (nic, state) = FakeNic::new(buffer);
    let addr = mem.as_ptr() as u64;
    state.lock().unwrap().registered.push((addr, mem.len() as u64, RKEY));
    let mut link = RdmaLink::new(Box::new(nic));
    assert!(link.expose(addr, mem.len() as u64, RKEY));
    (link, state)
}

#[test]
fn a_job_larger_than_the_buffer_moves_in_pieces_both_ways() {
    let mem = vec![0u8; 5000];
    let base = mem.as_ptr() as u64;
    let (mut link, state) = link_over(&mem, 256);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert!(link.write_many(&[(base + 100, &data[..1000]), (base + 1100, &data[1000..])], false));
    assert_eq!(mem[100..3100], data[..], "written where named");
    assert_eq!(state.lock().unwrap().posted, 3000u64.div_ceil(256) + 1, "1000 B = 4 pieces, 2000 B = 8");
    let mut back = vec![0u8; 3000];
    let (a, b) = back.split_at_mut(1234);
    assert!(link.read_many(&mut [(base + 100, a), (base + 1334, b)]));
    assert_eq!(back, data);
    // In order: one part at a time, each waited for.
    assert!(link.write_many(&[(base, &[1; 8]), (base + 8, &[2; 8])], true));
    assert_eq!(mem[..16], [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]);
    assert_eq!(link.fault(), None);
}

#[test]
fn a_job_outside_every_exposed_region_is_refused_before_anything_is_posted() {
    let mem = vec![9u8; 1024];
    let base = mem.as_ptr() as u64;
    let (mut link, state) = link_over(&mem, 512);
    let mut out = [0u8; 16];
    // One byte past the end; an address before it; a range that wraps; a job one of whose
    // parts is outside: refused whole.
    assert!(!link.read_many(&mut [(base + 1009, &mut out[..])]));
    assert!(!link.read_many(&mut [(base - 1, &mut out[..])]));
    assert!(!link.read_many(&mut [(u64::MAX - 4, &mut out[..])]));
    assert!(!link.write_many(&[(base, &[0; 4]), (base + 1022, &[0; 4])], false));
    assert_eq!(mem[..4], [9; 4], "the refused job's first part was not written either");
    assert_eq!(state.lock().unwrap().posted, 0, "nothing reached the NIC");
    assert_eq!(link.stats().refused, 4);
    assert_eq!(link.fault(), None, "a refusal does not break the link");
    assert!(link.read_many(&mut [(base + 1008, &mut out[..])]));
    // A withdrawn region is refused too; a region the link refuses to record.
    link.withdraw(base, 1024, RKEY);
    assert!(!link.read_many(&mut [(base, &mut out[..])]));
    assert!(!link.expose(base, 0, RKEY));
    assert!(!link.expose(u64::MAX - 1, 8, RKEY));
}

#[test]
fn an_error_completion_faults_the_link_and_every_later_job_fails() {
    let mem = vec![0u8; 4096];
    let base = mem.as_ptr() as u64;
    let (mut link, state) = link_over(&mem, 4096);
    // The host deregistered its region behind the engine's back: its NIC refuses the key.
    state.lock().unwrap().registered.clear();
    assert!(!link.write_many(&[(base, &[5; 64])], false));
    assert_eq!(link.fault(), Some(LinkFault::Completion(REMOTE_ACCESS)));
    assert_eq!(mem[..64], [0; 64]);
    let posted = state.lock().unwrap().posted;
    let mut out = [0u8; 8];
    assert!(!link.read_many(&mut [(base, &mut out[..])]), "a faulted link serves nothing");
    assert_eq!(state.lock().unwrap().posted, posted, "and posts nothing");
    assert_eq!(link.fault(), Some(LinkFault::Completion(REMOTE_ACCESS)), "the first fault is kept");

    // A flush (the QP went to the error state for another request) faults it the same way.
    let (mut link, state) = link_over(&mem, 4096);
    state.lock().unwrap().fail_next = Some(FLUSH);
    assert!(!link.read_many(&mut [(base, &mut out[..])]));
    assert_eq!(link.fault(), Some(LinkFault::Completion(FLUSH)));
}

#[test]
fn a_host_that_never_answers_faults_the_link_after_the_timeout() {
    let mem = vec![0u8; 64];
    let base = mem.as_ptr() as u64;
    let (link, state) = link_over(&mem, 64);
    let mut link = link.with_timeout(Duration::from_millis(20));
    state.lock().unwrap().silent = true;
    let started = std::time::Instant::now();
    let mut out = [0u8; 8];
    assert!(!link.read_many(&mut [(base, &mut out[..])]));
    assert_eq!(link.fault(), Some(LinkFault::Timeout));
    assert!(started.elapsed() < Duration::from_secs(5), "bounded wait");
}

#[test]
fn late_completions_keep_the_buffer_busy_until_polled_and_a_stray_one_faults_the_link() {
    let mem = vec![0u8; 3000];
    let base = mem.as_ptr() as u64;
    let (mut link, state) = link_over(&mem, 128);
    state.lock().unwrap().deferred = true;
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 239) as u8).collect();
    assert!(link.write_many(&[(base, &data)], false), "{:?}", link.fault());
    let mut back = vec![0u8; 3000];
    assert!(link.read_many(&mut [(base, &mut back[..])]));
    assert_eq!(back, data);
    // A completion of a request this link never posted: its bookkeeping cannot be trusted.
    state.lock().unwrap().stray = Some(1 << 40);
    assert!(!link.read_many(&mut [(base, &mut back[..8])]));
    assert_eq!(link.fault(), Some(LinkFault::Unexpected(1 << 40)));
}

#[test]
fn a_second_registration_of_the_same_bytes_outlives_the_first_one_withdrawn() {
    let mem = vec![3u8; 256];
    let base = mem.as_ptr() as u64;
    let (mut link, state) = link_over(&mem, 256);
    // The host registers the same bytes again under another key, then deregisters it: its NIC
    // forgets that key, and the engine must keep using the first.
    state.lock().unwrap().registered.push((base, 256, RKEY + 1));
    assert!(link.expose(base, 256, RKEY + 1));
    link.withdraw(base, 256, RKEY + 1);
    state.lock().unwrap().registered.retain(|r| r.2 != RKEY + 1);
    let mut out = [0u8; 16];
    for _ in 0..3 {
        assert!(link.read_many(&mut [(base + 100, &mut out[..])]), "{:?}", link.fault());
    }
    assert_eq!(out, [3; 16]);
    // Empty parts move nothing and are not checked (as with cma); too many parts are refused.
    assert!(link.write_many(&[(0, &[]), (base, &[3])], false));
    let parts: Vec<(u64, &[u8])> = (0..9).map(|i| (base + i, &mem[..1])).collect();
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| link.write_many(&parts, false)))
        .map_or(true, |ok| !ok));
}
