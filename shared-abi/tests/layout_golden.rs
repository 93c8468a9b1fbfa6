//! The layout of every ABI type on the target this test runs on equals `fixtures/abi-layout.txt`.
//! `make test` runs it natively (x86-64) and for aarch64 under qemu-user, so a host and a DPU
//! engine built from the same commit agree on every byte. `RINGCAST_BLESS=1` rewrites the golden
//! file (native runs only) after an intended ABI change.
use ringcast_abi::layout::{golden_matches, render, GOLDEN, LAYOUT};

#[test]
fn layout_matches_golden_file() {
    let mut now = String::new();
    render(&mut now).unwrap();
    if std::env::var_os("RINGCAST_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/abi-layout.txt");
        std::fs::write(path, &now).unwrap();
        return;
    }
    let strip = |s: &str| {
        s.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_owned).collect::<Vec<_>>()
    };
    let (want, got) = (strip(GOLDEN), strip(&now));
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w, g, "layout differs from fixtures/abi-layout.txt on {}", std::env::consts::ARCH);
    }
    assert_eq!(want.len(), got.len(), "layout table and golden file list different entries");
    assert!(golden_matches(GOLDEN, LAYOUT));
}

#[test]
fn golden_matcher_rejects_any_change() {
    let mut now = String::new();
    render(&mut now).unwrap();
    assert!(golden_matches(&now, LAYOUT));
    // A changed value, a renamed entry, a missing and an extra line must all be caught.
    let changed = now.replacen("SubmissionDescriptor.size 64", "SubmissionDescriptor.size 65", 1);
    let renamed = now.replacen("Completion.cookie", "Completion.cookiX", 1);
    let missing = now.replacen("WireHeader.total_len 28\n", "", 1);
    let extra = format!("{now}Extra.size 1\n");
    for bad in [changed, renamed, missing, extra] {
        assert_ne!(bad, now);
        assert!(!golden_matches(&bad, LAYOUT));
    }
}

#[test]
fn abi_types_round_trip_through_bytes() {
    use ringcast_abi::{Completion, RegionKey, RegionRef, Status, SubmissionDescriptor};
    use zerocopy::{FromBytes, IntoBytes};
    let d = SubmissionDescriptor::copy(
        7,
        RegionRef { key: RegionKey(3), offset: 16 },
        RegionRef { key: RegionKey(4), offset: 32 },
        100,
    );
    let bytes = d.as_bytes();
    assert_eq!(bytes.len(), 64);
    assert_eq!(bytes[0], 1, "COPY opcode at offset 0");
    assert_eq!(&bytes[16..24], &7u64.to_le_bytes(), "cookie at offset 16, little-endian");
    assert_eq!(SubmissionDescriptor::read_from_bytes(bytes).unwrap(), d);
    let c = Completion::new(9, d.opcode, Status::OK, 100);
    assert_eq!(Completion::read_from_bytes(c.as_bytes()).unwrap(), c);
}
