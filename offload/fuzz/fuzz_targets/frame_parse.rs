//! The wire parser on arbitrary bytes, and on arbitrary bytes re-sealed with a valid CRC (so
//! the checks behind the CRC are reached): never a panic; an accepted frame's accessors never
//! panic and its lengths are consistent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ringcast_abi::frame::Frame;

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= 4 {
        let mut sealed = data.to_vec();
        let n = sealed.len() - 4;
        let sum = crc32c::crc32c(&sealed[..n]).to_le_bytes();
        sealed[n..].copy_from_slice(&sum);
        check(&sealed);
    }
});

fn check(bytes: &[u8]) {
    if let Ok(f) = Frame::parse(bytes, crc32c::crc32c) {
        let _ = (f.kind(), f.sync(), f.retransmit(), f.digest(), f.tag());
        assert!(f.payload().len() <= f.body().len());
        assert!(f.body().len() + 44 == bytes.len());
        assert!(f.tagged().len() <= bytes.len() - 12);
    }
}
