//! Every counter of a running engine, in the order of `ringcast_abi::counters::ALL`: what
//! `COUNTERS` reads out (`ringcast stats`). One function fills the whole table from the intake,
//! the protocol and the fabric, so the table and the engine cannot drift apart unnoticed (a test
//! checks every slot is written).
use super::net::Net;
use ringcast_abi::counters::{COUNT, DROPS_FIRST, LEDGER_FIRST};
use ringcast_abi::ctl::{
    CtlKind, CtlMsg, CtlStatus, COMM_BROKEN, COMM_CLOSING, COMM_FAILED_OVER, COMM_FREEING,
};
use ringcast_proto::engine::Engine;
use ringcast_proto::ledger::{Ledger, Side};

/// The engine's counters now (`net`: its fabric, if it has one; without one the broadcast side
/// reads zero).
pub(crate) fn snapshot(engine: &Engine, net: Option<&Net>) -> [u64; COUNT] {
    let c = engine.counters();
    let p = engine.proto_counters();
    let f = net.map(Net::fabric_counters).unwrap_or_default();
    let comms = net.map(|n| n.comm_stats(engine)).unwrap_or_default();
    let mut v = [0u64; COUNT];
    let head = [
        engine.core().hosts_attached_now() as u64,
        c.hosts_attached,
        c.hosts_lost,
        c.completed_ok,
        c.completed_err,
        c.dropped_in_flight,
        c.dma_bytes,
        c.collectives,
        c.frags_multicast,
        c.frags_repair,
        c.penalty_rounds,
        f.sent,
        f.multicast,
        f.received,
        f.overrun,
        f.refused,
        p.syncs,
    ];
    v[..DROPS_FIRST].copy_from_slice(&head);
    let drops = DROPS_FIRST + p.drops.len();
    v[DROPS_FIRST..drops].copy_from_slice(&p.drops);
    let tail = [
        p.repair_frames,
        p.repair_bytes,
        u64::from(comms.alive),
        u64::from(comms.groups),
        comms.created,
        comms.dropped,
        comms.freeing,
        comms.overdue,
    ];
    let ledger_first = drops + tail.len();
    debug_assert_eq!(ledger_first, LEDGER_FIRST);
    v[drops..ledger_first].copy_from_slice(&tail);
    let mut l = p.ledger;
    if let Some(n) = net {
        l.absorb(&n.fabric_ledger());
    }
    let mut at = ledger_first;
    for per_side in [Ledger::copied_bytes, Ledger::hashed_bytes, Ledger::crcd_bytes, Ledger::delivered_bytes]
    {
        for side in Side::ALL {
            v[at] = per_side(&l, side);
            at += 1;
        }
    }
    v[at] = engine.frames_unsent();
    debug_assert_eq!(at + 1, COUNT);
    v
}

/// The answer to `COMM_LIST` (`msg.a`: which communicator, `msg.b`: which page).
pub(crate) fn comm_list_reply(engine: &Engine, msg: &CtlMsg) -> CtlMsg {
    let comms = engine.comm_list();
    let count = u32::try_from(comms.len()).unwrap_or(u32::MAX);
    let Some(c) = comms.get(msg.a as usize) else {
        let mut m = CtlMsg::error(msg, CtlStatus::BAD_REQUEST);
        m.b = count;
        return m;
    };
    let mut m = CtlMsg::reply(msg, CtlKind::COMM_LIST_OK);
    (m.a, m.b) = (msg.a, count);
    let pair = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
    if msg.b == 0 {
        m.c = c.handle;
        m.d = pair(c.ranks, c.state.engines);
        m.e = pair(c.state.posted, c.state.synced_epochs);
    } else {
        m.c = u64::from(c.local_members);
        m.e = c.handle; // the reader checks both pages name one communicator
        m.d = [
            (c.broken, COMM_BROKEN),
            (c.state.closing, COMM_CLOSING),
            (c.freeing, COMM_FREEING),
            (c.state.failed_over, COMM_FAILED_OVER),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |f, (_, bit)| f | bit);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The table's three parts fill it exactly (a miscount would panic in the engine), and the
    /// counters of an engine that has done nothing but start read as such.
    #[test]
    fn the_snapshot_fills_the_table_of_a_fresh_engine() {
        for networked in [false, true] {
            let engine = Engine::new(&Config::default().engine(), crate::crc::crc32c, networked)
                .expect("a default engine");
            let v = snapshot(&engine, None);
            let at = |name| v[ringcast_abi::counters::index_of(name).expect(name)];
            assert_eq!(at("descriptors_ok_total"), 0);
            assert_eq!(at("hosts_attached"), 0);
            assert_eq!(at("communicators"), 0, "no fabric: no communicator reported");
        }
    }
}
