//! The communicators one engine serves: the world (handle 0, derived from the job) and those its
//! local processes create with `COMM_CREATE` (handle = the cookie their members agreed on).
//!
//! A communicator's ranks are processes; the protocol's members are engines. From a creation
//! record ([`ringcast_abi::comm`]) this module derives, for every rank, the engine that holds it
//! (engines numbered in order of their first rank: the protocol's ranks) and its index among that
//! engine's members ([`Placement::Table`]), which the local [`Sequencer`] needs. Every local member
//! posts the same record (checked by digest); each learns its own rank from it.
use crate::comm::auth::Secret;
use crate::comm::{CommSpec, GroupId, PeerId, World};
use crate::engine::links::Links;
use crate::engine::node::placement::Placement;
use crate::engine::node::sequencer::Sequencer;
use crate::transfer::protocol::CommHandle;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::{CommCreateHeader, StatusKind, COMM_MAGIC};

use zerocopy::FromBytes;

/// Most members a created communicator may have (the world's own limit, `nodes * ppn`, is
/// checked too).
pub const MAX_COMM_SIZE: u32 = 1 << 24;

/// A creation record, checked.
#[derive(Debug)]
pub struct Record {
    /// The agreed identity and membership.
    pub seed: u64,
    /// Multicast group.
    pub group: GroupId,
    /// The communicator's secret.
    pub key: Secret,
    /// The posting process's rank.
    pub my_rank: u32,
    /// World rank of each member.
    pub members: Vec<u32>,
    /// Identifies the membership and identity (the same at every member).
    pub digest: u64,
}

/// Parses and checks `bytes` as posted by world rank `me` of a world of `world` ranks.
pub fn parse_record(bytes: &[u8], me: u32, world: u32) -> Result<Record, StatusKind> {
    let bad = Err(StatusKind::BadDescriptor);
    let Ok((h, rest)) = CommCreateHeader::read_from_prefix(bytes) else { return bad };
    if h.magic != COMM_MAGIC || h._reserved0 != 0 || h._reserved1 != [0; 2] {
        return bad;
    }
    // An all-zero secret is a host that forgot to draw one: its frames would be forgeable.
    if h.key == [0; 32] {
        return bad;
    }
    if h.size == 0 || h.size > MAX_COMM_SIZE || h.my_rank >= h.size {
        return bad;
    }
    if rest.len() != h.size as usize * 4 {
        return Err(StatusKind::BadLength);
    }
    let members: Vec<u32> =
        rest.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if members[h.my_rank as usize] != me {
        return bad;
    }
    // Every member inside the world, none twice.
    let mut seen = vec![0u64; (world as usize).div_ceil(64)];
    for &m in &members {
        if m >= world {
            return Err(StatusKind::BadRoot);
        }
        let (w, b) = ((m / 64) as usize, 1u64 << (m % 64));
        if seen[w] & b != 0 {
            return bad;
        }
        seen[w] |= b;
    }
    // FNV-1a over everything but `my_rank`: equal at every member of one creation.
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |b: &[u8]| {
        for &x in b {
            digest = (digest ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    };
    eat(&h.size.to_le_bytes());
    eat(&h.seed.to_le_bytes());
    eat(&h.group);
    eat(&h.key);
    eat(rest);
    Ok(Record { seed: h.seed, group: h.group, key: Secret(h.key), my_rank: h.my_rank, members, digest })
}

/// A communicator of this engine's local processes.
#[derive(Debug)]
pub struct LocalComm {
    /// Handle the hosts name it by (0: the world).
    pub handle: u64,
    /// Its protocol communicator; `None` once dropped (broken by a leaving process, or freed).
    pub proto: Option<CommHandle>,
    /// Its multicast group, joined at creation and left when the communicator is dropped —
    /// kept here because a broken communicator's protocol side is gone before that.
    pub group: GroupId,
    /// The posts of its local members.
    pub sequencer: Sequencer,
    /// The calls its local members made, and the shape queries about them (`call_shapes.rs`).
    pub calls: crate::engine::node::calls::Calls,
    /// Its calls that wait, checked against the manager's (`call_checks.rs`).
    pub checks: crate::engine::node::call_checks::Checks,
    /// Rank of each engine-local rank (index = local rank `0..ppn`), if a member.
    pub rank_of_local: Vec<Option<u32>>,
    /// Record digest (every local member must post the same).
    pub digest: u64,
    /// Local members (by gather index) that freed it.
    pub freed: Vec<bool>,
    /// Since when every local member has freed it: dropped once the protocol settled it with
    /// the other engines, or a peer timeout later.
    pub freeing_since: Option<u64>,
    /// Since when the protocol has settled it (freed ones): it stays a few repair timeouts
    /// more, so a member whose last `SYNC_DOWN` was lost finds it when it asks again.
    pub settled_since: Option<u64>,
    /// Its pair communicators: point-to-point transfers between its engines (`links.rs`).
    pub links: Links,
}

impl LocalComm {
    /// The world, as node `node` serves it: its local processes are world ranks
    /// `world.start(node)..`.
    pub fn world(
        node: u32,
        world: &World,
        proto: CommHandle,
        group: GroupId,
        capacity: usize,
        links: Links,
    ) -> Self {
        let locals = world.count(node);
        LocalComm {
            handle: 0,
            proto: Some(proto),
            group,
            sequencer: Sequencer::new(node, world.clone(), capacity),
            calls: crate::engine::node::calls::Calls::new(locals as usize),
            checks: Default::default(),
            rank_of_local: (0..locals).map(|l| world.rank(node, l)).collect(),
            digest: 0,
            freed: vec![false; locals as usize],
            freeing_since: None,
            settled_since: None,
            links,
        }
    }

    /// The sequencer index of engine-local rank `local`, if it is a (not freed) member.
    pub fn index_of_local(&self, local: u32) -> Option<u32> {
        let rank = (*self.rank_of_local.get(local as usize)?)?;
        self.sequencer.placement().local(rank)
    }
}

/// What a created communicator looks like from engine `node` of `world`: the protocol's spec
/// (members: the engines holding ranks, in order of their first rank) and the local placement.
pub fn derive(
    handle: u64,
    rec: &Record,
    node: u32,
    world: &World,
) -> Result<(CommSpec, Placement, u32), StatusKind> {
    let mut engines: Vec<u32> = Vec::new();
    let mut node_of = Vec::with_capacity(rec.members.len());
    let mut index_of = Vec::with_capacity(rec.members.len());
    // Members seen so far per engine, indexed like `engines`.
    let mut counts: Vec<u32> = Vec::new();
    let mut slot_of_node = BTreeMap::new();
    for &w in &rec.members {
        // (`parse_record` checked every member is a world rank.)
        let n = world.node_of(w).ok_or(StatusKind::BadRoot)?;
        let e = *slot_of_node.entry(n).or_insert_with(|| {
            engines.push(n);
            counts.push(0);
            engines.len() as u32 - 1
        });
        node_of.push(e);
        index_of.push(counts[e as usize]);
        counts[e as usize] += 1;
    }
    let me = *slot_of_node.get(&node).ok_or(StatusKind::BadDescriptor)?;
    let locals = counts[me as usize];
    let spec = CommSpec {
        cookie: handle,
        group: rec.group,
        members: engines.into_iter().map(PeerId).collect::<Vec<_>>().into(),
        my_rank: me,
        seed: rec.seed,
        key: rec.key,
        layout: Default::default(),
    };
    let placement = Placement::Table { me, node_of: Arc::from(node_of), index_of: Arc::from(index_of) };
    Ok((spec, placement, locals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size: u32, my_rank: u32, members: &[u32]) -> Vec<u8> {
        CommCreateHeader::new(size, my_rank, 9, [7; 14], [3; 32]).record(members).collect()
    }

    #[test]
    fn a_record_is_checked_and_its_digest_ignores_the_posters_rank() {
        let a = parse_record(&record(3, 0, &[4, 1, 6]), 4, 8).unwrap();
        let b = parse_record(&record(3, 2, &[4, 1, 6]), 6, 8).unwrap();
        assert_eq!(a.digest, b.digest);
        assert_eq!((a.my_rank, &a.members[..]), (0, &[4, 1, 6][..]));
        let bad = |bytes: &[u8], me| parse_record(bytes, me, 8).unwrap_err();
        assert_eq!(bad(&record(3, 0, &[4, 1, 6]), 1), StatusKind::BadDescriptor, "not the poster's rank");
        assert_eq!(bad(&record(3, 0, &[4, 1, 4]), 4), StatusKind::BadDescriptor, "a rank twice");
        assert_eq!(bad(&record(3, 0, &[4, 1, 9]), 4), StatusKind::BadRoot, "outside the world");
        assert_eq!(bad(&record(3, 3, &[4, 1, 6]), 4), StatusKind::BadDescriptor, "my_rank >= size");
        assert_eq!(bad(&record(4, 0, &[4, 1, 6]), 4), StatusKind::BadLength, "size vs length");
        assert_eq!(bad(&record(3, 0, &[4, 1, 6])[..20], 4), StatusKind::BadDescriptor, "truncated header");
        let mut wrong = record(3, 0, &[4, 1, 6]);
        wrong[0] ^= 1;
        assert_eq!(bad(&wrong, 4), StatusKind::BadDescriptor, "magic");
    }

    #[test]
    fn engines_are_numbered_by_first_rank_and_members_indexed_per_engine() {
        // ppn 2: world ranks 5,1,4,0 live on nodes 2,0,2,0.
        let rec = parse_record(&record(4, 0, &[5, 1, 4, 0]), 5, 8).unwrap();
        let world = World::Uniform { nodes: 4, ppn: 2 };
        let (spec, placement, locals) = derive(77, &rec, 2, &world).unwrap();
        assert_eq!(&spec.members[..], &[PeerId(2), PeerId(0)]);
        assert_eq!((spec.my_rank, spec.cookie, locals), (0, 77, 2));
        assert_eq!((0..4).map(|r| placement.local(r)).collect::<Vec<_>>(), [Some(0), None, Some(1), None]);
        assert_eq!((0..4).map(|r| placement.node(r)).collect::<Vec<_>>(), [0, 1, 0, 1]);
        assert!(derive(77, &rec, 3, &world).is_err(), "node 3 holds no member");
    }

    #[test]
    fn an_uneven_world_places_members_by_its_counts() {
        // Nodes of 3, 1 and 2 processes: world ranks 0-2 | 3 | 4-5.
        let world = World::from_counts(&[3, 1, 2]).unwrap();
        let rec = parse_record(&record(4, 1, &[5, 3, 2, 4]), 3, 6).unwrap();
        let (spec, placement, locals) = derive(5, &rec, 2, &world).unwrap();
        assert_eq!(&spec.members[..], &[PeerId(2), PeerId(1), PeerId(0)]);
        assert_eq!((spec.my_rank, locals), (0, 2));
        assert_eq!((0..4).map(|r| placement.node(r)).collect::<Vec<_>>(), [0, 1, 2, 0]);
        assert_eq!((0..4).map(|r| placement.local(r)).collect::<Vec<_>>(), [Some(0), None, None, Some(1)]);
        let (_, at_1, locals_1) = derive(5, &rec, 1, &world).unwrap();
        assert_eq!((at_1.local(1), locals_1), (Some(0), 1));
    }
}
