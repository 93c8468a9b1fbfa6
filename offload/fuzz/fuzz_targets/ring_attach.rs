//! Opening a host attach segment whose bytes a corrupt or hostile engine chose: the fuzz input
//! is a list of (offset, value) byte mutations applied to a valid segment, so validation is
//! reached field by field. The segment header and both ring headers are validated, and using
//! the rings of an accepted segment never panics or reads outside them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ringcast_ring::{attach, ShmSegment};

fuzz_target!(|data: &[u8]| {
    let valid = attach::create(0, 4).unwrap();
    let len = valid.segment.len();
    let mut bytes = vec![0u8; len];
    valid.segment.read_at(0, &mut bytes).unwrap();
    for m in data.chunks_exact(3) {
        let at = u16::from_le_bytes([m[0], m[1]]) as usize % len;
        bytes[at] = m[2];
    }
    let seg = ShmSegment::create("fuzz", len).unwrap();
    seg.write_at(0, &bytes).unwrap();
    let fd = seg.fd().try_clone_to_owned().unwrap();
    if let Ok(mut rings) = attach::open(fd) {
        for _ in 0..4 {
            let _ = rings.cq.try_pop();
            let _ = rings.sq.try_push(Default::default());
            let _ = rings.sq.free_slots();
        }
    }
});
