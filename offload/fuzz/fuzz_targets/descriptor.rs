//! Descriptor validation on arbitrary 64-byte submissions: never a panic, exactly one
//! completion echoing the cookie, and any DMA (or collective buffer) inside the registered
//! regions — or, a collective in step (refused for its buffers or a field its schedule does
//! not read), every buffer `None` (it runs on no memory); an allreduce only with a type and
//! operation the engine reduces (an in-step call's in-step operation too).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ringcast_abi::{Access, SubmissionDescriptor};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::{Action, Core};
use ringcast_proto::config::EngineConfig;
use zerocopy::FromBytes;

fuzz_target!(|data: &[u8]| {
    let mut core = Core::new(EngineConfig::default());
    let h = core.attach_host(0).unwrap();
    let a = core.register(h, SegmentHandle(1), 1 << 20, 0, 4096, Access::READ_WRITE).unwrap();
    let b = core.register(h, SegmentHandle(1), 1 << 20, 8192, 4096, Access::READ).unwrap();
    for chunk in data.chunks(64) {
        let mut bytes = [0u8; 64];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let mut d = SubmissionDescriptor::read_from_bytes(&bytes).unwrap();
        // Steer a share into valid keys so the DMA checks are reached.
        if bytes[63] & 1 == 1 {
            d.key = a;
            d.aux_key = if bytes[63] & 2 == 0 { a } else { b };
        }
        let mut completions = 0;
        for act in core.submit(h, &d, 0) {
            match act {
                Action::Complete { cqe, .. } => {
                    completions += 1;
                    assert_eq!(cqe.cookie, d.cookie);
                }
                Action::Dma { src, dst, len, .. } => {
                    assert!(dst.offset + len <= 4096, "destination outside region a");
                    assert!(src.offset + len <= 4096 || (src.offset >= 8192 && src.offset + len <= 8192 + 4096));
                }
                Action::Bcast { cookie, buf, len, in_step, .. } => {
                    // Handed to the runner, which completes it: it counts as this one's answer.
                    completions += 1;
                    assert_eq!(cookie, d.cookie);
                    match (in_step, buf) {
                        (Some(_), buf) => assert!(buf.is_none(), "an in-step broadcast touches no memory"),
                        (None, Some(buf)) => {
                            assert!(buf.offset + len <= 4096 || (buf.offset >= 8192 && buf.offset + len <= 8192 + 4096))
                        }
                        (None, None) => panic!("a broadcast not in step has its buffer"),
                    }
                }
                Action::Allgather(g) | Action::Alltoall(g) | Action::Barrier(g) if g.in_step.is_some() => {
                    // Refused for its buffers or a field: handed to the runner all the same, on
                    // none. (A barrier's length is a field it does not read: any.)
                    completions += 1;
                    assert_eq!(g.cookie, d.cookie);
                    assert!(g.me < g.size && (g.len > 0 || matches!(act, Action::Barrier(_))));
                    assert!(g.recv.is_none() && g.send.is_none_or(|s| s.is_none()), "{g:?}");
                    if let Some((t, op)) = g.reduce {
                        assert!(op.supports(t) && g.len % t.size().unwrap_or(1) as u64 == 0);
                    }
                }
                Action::Allgather(g) => {
                    let (cookie, send, recv, len, size, me, reduce) = (g.cookie, g.send, g.recv, g.len, g.size, g.me, g.reduce);
                    // Handed to the runner (an allgather or allreduce), which completes it.
                    completions += 1;
                    assert_eq!(cookie, d.cookie);
                    let inside = |off: u64, n: u64| off + n <= 4096 || (off >= 8192 && off + n <= 8192 + 4096);
                    assert!(me < size && len > 0);
                    assert!(recv.is_some_and(|r| inside(r.offset, len * u64::from(size))), "receive buffer outside its region");
                    if let Some(send) = send {
                        assert!(send.is_some_and(|s| inside(s.offset, len)), "send block outside its region");
                    }
                    if let Some((t, op)) = reduce {
                        assert!(op.supports(t) && len % t.size().unwrap_or(1) as u64 == 0);
                    }
                }
                Action::Alltoall(g) => {
                    // Handed to the runner, which completes it; a work buffer of (size + 1) ×
                    // size × len bytes and a send buffer of size × len, inside their regions.
                    completions += 1;
                    assert_eq!(g.cookie, d.cookie);
                    let whole = g.len * u64::from(g.size);
                    assert!(g.me < g.size && g.len > 0 && g.reduce.is_none());
                    let inside = |off: u64, n: u64| off + n <= 4096 || (off >= 8192 && off + n <= 8192 + 4096);
                    assert!(g.recv.is_some_and(|r| inside(r.offset, whole * (u64::from(g.size) + 1))), "work buffer outside its region");
                    assert!(g.send.flatten().is_some_and(|s| inside(s.offset, whole)), "send buffer outside its region");
                }
                Action::Barrier(g) => {
                    // Handed to the runner, which completes it; scratch of a byte per rank.
                    completions += 1;
                    assert_eq!(g.cookie, d.cookie);
                    assert!(g.me < g.size && g.len >= u64::from(g.size) && g.send.is_none() && g.reduce.is_none());
                    let inside = |off: u64, n: u64| off + n <= 4096 || (off >= 8192 && off + n <= 8192 + 4096);
                    assert!(g.recv.is_some_and(|r| inside(r.offset, g.len)), "scratch outside its region");
                }
                Action::Comm { cookie, buf, len, .. } => {
                    // Handed to the runner's communicator tables, which complete it.
                    completions += 1;
                    assert_eq!(cookie, d.cookie);
                    if let Some(buf) = buf {
                        assert!(buf.offset + len <= 4096 || (buf.offset >= 8192 && buf.offset + len <= 8192 + 4096));
                    }
                }
            }
        }
        assert_eq!(completions, 1);
    }
});
