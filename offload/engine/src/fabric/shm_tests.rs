//! Unit tests of the `shm` fabric's private parts (segment names, owners, doorbells).
use super::*;

#[test]
fn names_and_cleanup_matching() {
    let g: GroupId = [0xab; 14];
    assert_eq!(log_name("j", &g), format!("ringcast-j-g{}", "ab".repeat(14)));
    assert_eq!(ring_name("j", PeerId(3), PeerId(10)), "ringcast-j-3-10");
    assert!(is_job_segment(&"gab".replace("ab", &"ab".repeat(14))));
    assert!(is_job_segment("3-10"));
    assert!(is_job_segment("3-10.tmp.77.0"));
    assert!(!is_job_segment("b-3-10"), "job a must not clean job a-b");
    assert!(!is_job_segment("g12"));
    assert!(!is_job_segment("3-"));
    assert!(check_job("job_1-x").is_ok());
    for bad in ["", "a/b", "a.b", "..", &"x".repeat(65)] {
        assert!(check_job(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn owners_of_segment_names() {
    assert_eq!(job_owner("ringcast-run-123-bells"), Some(123));
    assert_eq!(job_owner("ringcast-run-123-w-0-1"), Some(123));
    assert_eq!(job_owner("ringcast-mpi-77-4242-g00"), Some(77));
    assert_eq!(job_owner("ringcast-calibrate-9-w-bells"), Some(9));
    assert_eq!(job_owner("ringcast-runx-123-bells"), None);
    assert_eq!(job_owner("ringcast-run-12a-bells"), None);
    assert_eq!(job_owner("ringcast-run--bells"), None);
    assert_eq!(job_owner("ringcast-default-bells"), None);
    assert_eq!(job_owner("ringcast-trun-1-bells"), None);
    assert_eq!(tmp_creator("ringcast-j-0-1.tmp.4711.3"), Some(4711));
    assert_eq!(tmp_creator("ringcast-j-0-1"), None);
    assert!(!process_gone(std::process::id() as i32));
    assert!(!process_gone(0), "no pid 0: not provably gone");
}

/// A sleeping member is rung at the first datagram of a pass and once more at its end
/// (`flush`) for the datagrams after that, not once per datagram. Seen failing with the
/// bells rung at each send (the bell moved by 3 over three datagrams).
#[test]
fn a_sleeping_member_is_rung_once_per_flush_not_per_datagram() {
    use std::sync::atomic::Ordering;
    let job = format!("unit-bells-{}", std::process::id());
    let mut a = ShmFabric::new(&job, PeerId(0), 2, 1000).unwrap();
    let b = ShmFabric::new(&job, PeerId(1), 2, 1000).unwrap();
    assert!(a.connect(PeerId(1)));
    let seen = b.arm().expect("shm has doorbells");
    let bell = || b.bell().expect("bell").load(Ordering::SeqCst);
    a.send(PeerId(1), b"frame");
    assert_eq!(bell(), seen.wrapping_add(1), "rung at the pass's first datagram");
    a.send(PeerId(1), b"frame");
    a.send(PeerId(1), b"frame");
    assert_eq!(bell(), seen.wrapping_add(1), "not again within the pass");
    a.flush();
    assert_eq!(bell(), seen.wrapping_add(2), "once more at its end, still asleep");
    a.flush();
    assert_eq!(bell(), seen.wrapping_add(2), "nothing owed");
    b.disarm();
    a.send(PeerId(1), b"frame");
    a.flush();
    assert_eq!(bell(), seen.wrapping_add(2), "a member awake is not rung");
    let (mut got, mut b) = (0, b);
    loop {
        let n = b.poll(16, &mut |_, f| assert_eq!(f, b"frame"));
        if n == 0 {
            break;
        }
        got += n;
    }
    assert_eq!(got, 4, "every datagram delivered");
}

#[test]
fn bad_construction_is_refused() {
    assert!(ShmFabric::new("unit-bad", PeerId(2), 2, 1000).is_err());
    assert!(ShmFabric::new("unit-bad", PeerId(0), 0, 1000).is_err());
    assert!(ShmFabric::new("unit-bad", PeerId(0), 2, FRAME_PAYLOAD + 1).is_err());
    assert!(ShmFabric::new("unit/bad", PeerId(0), 2, 1000).is_err());
}
