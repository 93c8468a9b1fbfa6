//! Core tests: every descriptor gets exactly one completion with the right typed status, DMA
//! precedes its completion and stays inside registered memory, for any input bytes.
use super::*;
use proptest::prelude::*;
use ringcast_abi::{Opcode, RegionRef};
use zerocopy::FromBytes;

const SEG: SegmentHandle = SegmentHandle(1);

fn core_with_regions() -> (Core, HostId, RegionKey, RegionKey) {
    let mut core = Core::new(EngineConfig::default());
    let h = core.attach_host(0).unwrap();
    let a = core.register(h, SEG, 4096, 0, 1024, Access::READ_WRITE).unwrap();
    let b = core.register(h, SEG, 4096, 2048, 1024, Access::READ).unwrap();
    (core, h, a, b)
}

fn drain(taken: Taken) -> Vec<Action> {
    taken.into_vec()
}

/// The status the last action gives its descriptor: a completion's, or — a collective in step
/// for its buffers, handed on to run on none of them — its refusal's.
fn status_of(actions: &[Action]) -> StatusKind {
    match actions.last() {
        Some(Action::Complete { cqe, .. }) => StatusKind::try_from(cqe.status).unwrap(),
        Some(Action::Bcast { in_step: Some(s), buf, .. }) => {
            assert!(buf.is_none(), "an in-step broadcast touches no memory");
            *s
        }
        Some(Action::Allgather(g) | Action::Alltoall(g) | Action::Barrier(g)) if g.in_step.is_some() => {
            assert!(g.recv.is_none() && g.send.is_none_or(|s| s.is_none()), "{g:?}");
            g.in_step.unwrap()
        }
        other => panic!("last action is not a completion: {other:?}"),
    }
}

#[test]
fn nop_completes_ok_with_cookie() {
    let (mut core, h, _, _) = core_with_regions();
    let taken = core.submit(h, &SubmissionDescriptor::nop(42), 5);
    let acts = drain(taken);
    assert_eq!(acts.len(), 1);
    let Action::Complete { cqe, started, host } = acts[0] else { panic!() };
    assert_eq!((cqe.cookie, cqe.status, host, started), (42, Status::OK, h, 5));
}

#[test]
fn copy_emits_dma_then_completion() {
    let (mut core, h, a, b) = core_with_regions();
    let d = SubmissionDescriptor::copy(
        7,
        RegionRef { key: a, offset: 10 },
        RegionRef { key: b, offset: 20 },
        100,
    );
    let taken = core.submit(h, &d, 0);
    let acts = drain(taken);
    assert_eq!(
        acts[0],
        Action::Dma {
            host: h,
            src_key: b,
            dst_key: a,
            src: Resolved { segment: SEG, offset: 2048 + 20 },
            dst: Resolved { segment: SEG, offset: 10 },
            len: 100
        }
    );
    assert_eq!(status_of(&acts), StatusKind::Ok);
    let Action::Complete { cqe, .. } = acts[1] else { panic!() };
    assert_eq!(cqe.bytes, 100);
    assert_eq!(core.counters().dma_bytes, 100);
}

#[test]
fn every_bad_descriptor_gets_its_typed_status() {
    let (mut core, h, a, b) = core_with_regions();
    let r = |key, offset| RegionRef { key, offset };
    let ok = SubmissionDescriptor::copy(1, r(a, 0), r(b, 0), 8);
    let cases: Vec<(SubmissionDescriptor, StatusKind)> = vec![
        (SubmissionDescriptor { opcode: Opcode(0xee), ..ok }, StatusKind::UnknownOpcode),
        (SubmissionDescriptor { len: 0, ..ok }, StatusKind::BadLength),
        (SubmissionDescriptor { len: (1 << 30) + 1, ..ok }, StatusKind::BadLength),
        (SubmissionDescriptor { offset: 1020, ..ok }, StatusKind::OutOfBounds),
        (SubmissionDescriptor { aux_offset: u64::MAX, ..ok }, StatusKind::OutOfBounds),
        (SubmissionDescriptor { key: RegionKey(0xdead), ..ok }, StatusKind::UnknownRegion),
        (SubmissionDescriptor::copy(1, r(b, 0), r(a, 0), 8), StatusKind::AccessDenied),
        (SubmissionDescriptor { flags: 0x80, ..ok }, StatusKind::BadFlags),
        (SubmissionDescriptor { _reserved1: 1, ..ok }, StatusKind::BadDescriptor),
        (SubmissionDescriptor { comm: 3, ..ok }, StatusKind::BadDescriptor),
        (SubmissionDescriptor { len: 1, ..SubmissionDescriptor::nop(1) }, StatusKind::BadDescriptor),
        (SubmissionDescriptor::copy(1, r(a, 0), r(a, 4), 8), StatusKind::Overlap),
    ];
    for (d, want) in cases {
        let taken = core.submit(h, &d, 0);
        let acts = drain(taken);
        assert_eq!(acts.len(), 1, "{d:?}: an invalid descriptor must not move bytes");
        assert_eq!(status_of(&acts), want, "{d:?}");
    }
    assert_eq!(core.counters().completed_err, 12);
    assert_eq!(core.counters().dma_bytes, 0);
}

#[test]
fn registration_limits_and_detach() {
    let mut core = {
        let mut c = EngineConfig::default();
        (c.limits.max_hosts, c.limits.max_regions, c.limits.max_region_bytes) = (1, 1, 100);
        Core::new(c)
    };
    let h = core.attach_host(0).unwrap();
    assert_eq!(core.attach_host(0), Err(CtlStatus::TOO_MANY_HOSTS));
    assert_eq!(
        core.register(h, SEG, 50, 40, 20, Access::READ),
        Err(CtlStatus::BAD_REQUEST),
        "past segment end"
    );
    assert_eq!(core.register(h, SEG, 500, 0, 200, Access::READ), Err(CtlStatus::LIMIT));
    assert_eq!(core.register(h, SEG, 500, 0, 10, Access(8)), Err(CtlStatus::BAD_REQUEST));
    let k = core.register(h, SEG, 500, 0, 10, Access::READ).unwrap();
    assert_eq!(core.register(h, SEG, 500, 0, 10, Access::READ), Err(CtlStatus::TOO_MANY_REGIONS));
    assert_eq!(core.deregister(h, RegionKey(k.0 ^ 0x10000)), Err(CtlStatus::UNKNOWN_REGION));
    let segs = core.detach_host(h, Departure::Lost, 3, 0);
    assert_eq!(segs, vec![SEG]);
    let c = core.counters();
    assert_eq!((c.hosts_lost, c.dropped_in_flight), (1, 3));
    // The slot is free again and the departed host's keys are gone with it.
    let h2 = core.attach_host(0).unwrap();
    let taken = core.submit(
        h2,
        &SubmissionDescriptor::copy(1, RegionRef { key: k, offset: 0 }, RegionRef { key: k, offset: 5 }, 1),
        0,
    );
    assert_eq!(status_of(&drain(taken)), StatusKind::UnknownRegion);
}

#[test]
fn bcast_is_validated_then_handed_to_the_runner() {
    let (_, _, a, b) = core_with_regions();
    // Two nodes: rank 1 is another engine's process.
    let mut config = EngineConfig::default();
    config.topology.nodes = 2;
    let mut core = Core::new(config);
    let h = core.attach_host(0).unwrap();
    assert_eq!(core.register(h, SEG, 4096, 0, 1024, Access::READ_WRITE), Ok(a));
    assert_eq!(core.register(h, SEG, 4096, 2048, 1024, Access::READ), Ok(b));
    let at = |key| RegionRef { key, offset: 0 };
    // This engine is node 0: as the root it reads its buffer, as a receiver it writes it.
    let taken = core.submit(h, &SubmissionDescriptor::bcast(7, 0, 0, at(b), 100), 3);
    let acts = drain(taken);
    assert!(matches!(acts[..], [Action::Bcast { cookie: 7, root: 0, len: 100, started: 3, .. }]), "{acts:?}");
    let taken = core.submit(h, &SubmissionDescriptor::bcast(8, 0, 1, at(a), 100), 0);
    assert!(matches!(drain(taken)[..], [Action::Bcast { cookie: 8, root: 1, .. }]));
    let bad = [
        (SubmissionDescriptor::bcast(1, 0, 1, at(b), 100), StatusKind::AccessDenied),
        (SubmissionDescriptor::bcast(1, 0, 0, at(b), 0), StatusKind::BadLength),
        (SubmissionDescriptor::bcast(1, 0, 2, at(b), 100), StatusKind::BadRoot),
        (SubmissionDescriptor::bcast(1, 0, 0, at(b), 5000), StatusKind::OutOfBounds),
        (
            SubmissionDescriptor { aux_key: a, ..SubmissionDescriptor::bcast(1, 0, 0, at(b), 10) },
            StatusKind::BadDescriptor,
        ),
    ];
    for (d, want) in bad {
        let taken = core.submit(h, &d, 0);
        assert_eq!(status_of(&drain(taken)), want, "{d:?}");
    }
}

#[test]
fn reductions_carry_their_spec_and_a_reduce_its_root() {
    use ringcast_abi::{DataType, ReduceOp};
    let (mut core, h, a, _) = core_with_regions();
    let at = RegionRef { key: a, offset: 0 };
    // A world of one rank: a reduce to rank 0 is handed to the runner with its root.
    let taken =
        core.submit(h, &SubmissionDescriptor::reduce(5, 0, 0, at, None, 16, DataType::I64, ReduceOp::SUM), 0);
    let acts = drain(taken);
    match &acts[..] {
        [Action::Allgather(g)] => {
            assert_eq!(
                (g.cookie, g.root, g.reduce, g.len),
                (5, Some(0), Some((DataType::I64, ReduceOp::SUM)), 16)
            )
        }
        other => panic!("{other:?}"),
    }
    let bad = [
        // An allreduce names no root.
        (
            SubmissionDescriptor {
                root: 1,
                ..SubmissionDescriptor::allreduce(1, 0, at, None, 8, DataType::I64, ReduceOp::SUM)
            },
            StatusKind::BadDescriptor,
        ),
        // A reduce to a rank outside the communicator.
        (
            SubmissionDescriptor::reduce(2, 0, 1, at, None, 8, DataType::I64, ReduceOp::SUM),
            StatusKind::BadRoot,
        ),
        // A bitwise operation on floats.
        (
            SubmissionDescriptor::reduce(3, 0, 0, at, None, 8, DataType::F64, ReduceOp::BAND),
            StatusKind::BadDescriptor,
        ),
        // No type at all.
        (
            SubmissionDescriptor {
                spec: 0,
                ..SubmissionDescriptor::reduce(4, 0, 0, at, None, 8, DataType::I64, ReduceOp::SUM)
            },
            StatusKind::BadDescriptor,
        ),
        // A spec on an opcode that reduces nothing.
        (
            SubmissionDescriptor { spec: 0x0107, ..SubmissionDescriptor::bcast(6, 0, 0, at, 8) },
            StatusKind::BadDescriptor,
        ),
        // Not a whole number of elements.
        (
            SubmissionDescriptor::reduce(7, 0, 0, at, None, 12, DataType::I64, ReduceOp::SUM),
            StatusKind::BadLength,
        ),
    ];
    for (d, want) in bad {
        let taken = core.submit(h, &d, 0);
        assert_eq!(status_of(&drain(taken)), want, "{d:?}");
    }
}

/// A descriptor fault that leaves the call's schedule unknown here refuses it at once (one
/// completion: it posts nothing); one in a field the schedule does not read hands the call on,
/// in step, to run on no memory — a reduction under an in-step operation.
#[test]
fn faults_that_shape_the_call_refuse_it_at_once_the_others_run_it_in_step() {
    use ringcast_abi::{DataType, ReduceOp};
    let (mut core, h, a, b) = core_with_regions();
    let at = RegionRef { key: a, offset: 0 };
    let allreduce = SubmissionDescriptor::allreduce(1, 0, at, None, 16, DataType::I64, ReduceOp::MAX);
    let at_once = [
        (SubmissionDescriptor { spec: 0x2a, ..allreduce }, StatusKind::BadDescriptor), // no such type
        (SubmissionDescriptor { len: 12, ..allreduce }, StatusKind::BadLength),
        (SubmissionDescriptor { len: 0, ..allreduce }, StatusKind::BadLength),
        (SubmissionDescriptor { flags: 0x80, ..allreduce }, StatusKind::BadFlags),
        (
            SubmissionDescriptor::reduce(3, 0, 1, at, None, 8, DataType::I64, ReduceOp::SUM),
            StatusKind::BadRoot,
        ),
    ];
    // A fault that shapes the call wins over one that does not, whichever field comes first.
    let both = [
        (SubmissionDescriptor { root: 1, len: 12, ..allreduce }, StatusKind::BadLength),
        (SubmissionDescriptor { _reserved1: 1, flags: 0x80, ..allreduce }, StatusKind::BadFlags),
        (SubmissionDescriptor { spec: 0xee07, len: 0, ..allreduce }, StatusKind::BadLength),
        (
            SubmissionDescriptor::reduce(8, 0, 1, at, None, 8, DataType::I64, ReduceOp(0xee)),
            StatusKind::BadRoot,
        ),
        (
            SubmissionDescriptor {
                aux_key: RegionKey::NONE,
                len: 0,
                ..SubmissionDescriptor::alltoall(5, 0, at, at, 8)
            },
            StatusKind::BadLength,
        ),
        (
            SubmissionDescriptor { root: 1, comm: 99, ..SubmissionDescriptor::barrier(7, 0, at, 1) },
            StatusKind::UnknownCommunicator,
        ),
    ];
    for (d, want) in at_once.into_iter().chain(both) {
        let taken = core.submit(h, &d, 0);
        let acts = drain(taken);
        assert!(matches!(acts[..], [Action::Complete { .. }]), "{d:?}: refused at once, {acts:?}");
        assert_eq!(status_of(&acts), want, "{d:?}");
    }
    let in_step = [
        (SubmissionDescriptor { spec: 0xee07, ..allreduce }, StatusKind::BadDescriptor), // no such operation
        (
            SubmissionDescriptor::allreduce(1, 0, at, None, 16, DataType::F64, ReduceOp::BXOR),
            StatusKind::BadDescriptor,
        ),
        // A pair type with an operation pairs have not: in step under MAXLOC.
        (
            SubmissionDescriptor::allreduce(1, 0, at, None, 24, DataType::PAIR_F64_I32, ReduceOp::SUM),
            StatusKind::BadDescriptor,
        ),
        (SubmissionDescriptor { root: 1, ..allreduce }, StatusKind::BadDescriptor),
        (SubmissionDescriptor { _reserved1: 9, ..allreduce }, StatusKind::BadDescriptor),
        (
            SubmissionDescriptor { root: 1, ..SubmissionDescriptor::allgather(4, 0, at, None, 8) },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor { aux_offset: 8, ..SubmissionDescriptor::allgather(4, 0, at, None, 8) },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor {
                aux_key: RegionKey::NONE,
                ..SubmissionDescriptor::alltoall(5, 0, at, at, 8)
            },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor { aux_key: b, ..SubmissionDescriptor::bcast(6, 0, 0, at, 8) },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor { root: 2, ..SubmissionDescriptor::alltoall(5, 0, at, at, 8) },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor { spec: 0x0107, ..SubmissionDescriptor::bcast(6, 0, 0, at, 8) },
            StatusKind::BadDescriptor,
        ),
        (SubmissionDescriptor::barrier(7, 0, at, 0), StatusKind::BadLength),
        (
            SubmissionDescriptor { root: 3, ..SubmissionDescriptor::barrier(7, 0, at, 1) },
            StatusKind::BadDescriptor,
        ),
        // A field's fault is reported before a buffer's, whichever is read first.
        (
            SubmissionDescriptor {
                aux_offset: 8,
                ..SubmissionDescriptor::allgather(
                    4,
                    0,
                    RegionRef { key: RegionKey(0xdead), offset: 0 },
                    None,
                    8,
                )
            },
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor {
                spec: 0xee07,
                ..SubmissionDescriptor::allreduce(
                    1,
                    0,
                    at,
                    Some(RegionRef { key: RegionKey(0xdead), offset: 0 }),
                    16,
                    DataType::I64,
                    ReduceOp::MAX,
                )
            },
            StatusKind::BadDescriptor,
        ),
    ];
    for (d, want) in in_step {
        let taken = core.submit(h, &d, 0);
        let acts = drain(taken);
        assert!(!matches!(acts[..], [Action::Complete { .. }]), "{d:?}: handed on, {acts:?}");
        assert_eq!(status_of(&acts), want, "{d:?}");
        if let [Action::Allgather(g)] = &acts[..] {
            let (t, op) = ringcast_abi::reduce::parse_reduce_spec(d.spec);
            if let Some((gt, gop)) = g.reduce {
                assert!(gop.supports(gt), "{d:?}: an in-step operation the engine reduces with");
                assert_eq!(gt, t, "the call's own type");
                assert_eq!(g.in_step_op, !op.supports(t), "{d:?}: an in-step operation, and said so");
            }
        }
    }
}

/// An in-place block of rank 3 whose buffer starts near the end of the address space: refused
/// for its buffer (`OutOfBounds`), not an overflow.
#[test]
fn an_in_place_block_past_the_address_space_is_out_of_bounds() {
    struct Third;
    impl Ranks for Third {
        fn rank(&self, _: Option<u32>, _: u64) -> Option<u32> {
            Some(3)
        }
        fn size(&self, _: u64) -> Option<u32> {
            Some(4)
        }
    }
    let (mut core, h, a, _) = core_with_regions();
    let d = SubmissionDescriptor {
        offset: u64::MAX - 4,
        ..SubmissionDescriptor::allgather(4, 0, RegionRef { key: a, offset: 0 }, None, 8)
    };
    let taken = core.submit_with(h, &d, 0, &Third);
    assert_eq!(status_of(&drain(taken)), StatusKind::OutOfBounds);
}

proptest! {
    /// Any 64 bytes from a host: no panic, exactly one completion echoing the cookie — or one
    /// broadcast handed to the runner, which completes it — and any DMA or broadcast buffer lies
    /// inside the registered regions with the right access.
    #[test]
    fn arbitrary_descriptor_bytes_are_safe(bytes in proptest::collection::vec(any::<u8>(), 64), pick in 0u8..4) {
        let (mut core, h, a, b) = core_with_regions();
        let mut d = SubmissionDescriptor::read_from_bytes(&bytes).unwrap();
        // Steer a share of cases into valid territory so the DMA path is exercised too.
        if pick > 0 {
            d.opcode = Opcode::COPY; d.flags = 0; d.spec = 0; d._reserved1 = 0; d.comm = 0; d.root = 0;
            d.len %= 1100; d.offset %= 1100; d.aux_offset %= 1100;
            d.key = a;
            d.aux_key = if pick == 1 { a } else { b };
        }
        let taken = core.submit(h, &d, 1);
        let acts = drain(taken);
        if let [Action::Bcast { cookie, buf, len, .. }] = acts[..] {
            prop_assert_eq!(cookie, d.cookie);
            // (No memory, `None`: in step, it touches none.)
            prop_assert!(buf.is_none_or(|b| b.offset + len <= 1024 || (b.offset >= 2048 && b.offset + len <= 3072)));
            return Ok(());
        }
        let completes: Vec<_> = acts.iter().filter(|x| matches!(x, Action::Complete { .. })).collect();
        prop_assert_eq!(completes.len(), 1);
        let Action::Complete { cqe, .. } = completes[0] else { unreachable!() };
        prop_assert_eq!(cqe.cookie, d.cookie);
        for act in &acts {
            if let Action::Dma { src, dst, len, .. } = *act {
                prop_assert!(cqe.status.is_ok());
                // a: [0, 1024) read-write; b: [2048, 3072) read-only.
                prop_assert!(dst.offset + len <= 1024, "dst outside region a");
                let in_a = src.offset + len <= 1024;
                let in_b = src.offset >= 2048 && src.offset + len <= 3072;
                prop_assert!(in_a || in_b);
            }
        }
    }
}
