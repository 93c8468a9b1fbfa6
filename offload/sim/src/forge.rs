//! The DST's insider forger: someone who sees a communicator's traffic (so knows its cookie,
//! its members' addresses, the wire format, the roots and lengths of coming broadcasts) but not
//! its secret, and injects whole forged messages for coming broadcast ids — every fragment
//! with a valid CRC32C and a well-formed header, the last carrying a MAC — plus forged
//! control frames (a root's "aborted", a synchronization's "everything acknowledged"), each
//! spoofing a member's address.
//!
//! The forger keys its tags and MACs with a key of its own; the engines must drop every such
//! frame (`DropReason::BadTag`) and the broadcasts must end as if nothing had been sent. With
//! [`Forger::with_real_key`] (tests only) it holds the communicator's secret — what an unkeyed
//! CRC digest amounted to before frames were authenticated — and the checker must then see
//! wrong bytes delivered or broadcasts failing: proof that it would notice a forgery getting
//! through.
//!
//! It forges for the engines' `protocol.auth` (it sees their version byte on the wire): with
//! `mac` the last fragment carries a MAC of its forged message, with `tag` a MAC of the call
//! alone, as the engines of that setting send. Without the key, both settings drop every
//! frame for its tag — under `tag` the keyed header tag is what stops a forger; a forged
//! payload that passes needs the key (or, unlike this forger, the power to rewrite genuine
//! frames on the wire, which `tag` presumes nobody but the job's own user has).
use ringcast_abi::frame::{emit, SyncBody, DIGEST_LEN};
use ringcast_abi::wire::{FrameKind, WireHeader, READY_FLAG_ABORTED, WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_proto::comm::auth::{call_binding, CommKeys, Secret};
use ringcast_proto::config::Auth;
use ringcast_proto::rng::SimRng;
use ringcast_proto::transfer::bitmap::Geometry;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

/// Most fragments of one forged message (the last always among them).
const MAX_FORGED_FRAGS: u32 = 64;

/// What the forger knows of one communicator.
pub struct Target<'a> {
    /// The cookie every frame of it carries.
    pub cookie: u64,
    /// Its members' nodes, by rank.
    pub members: &'a [usize],
    /// Its broadcasts: (root rank, length), in broadcast-id order.
    pub bcasts: &'a [(u32, u32)],
    /// Its secret (used only by [`Forger::with_real_key`]).
    pub secret: Secret,
}

/// A frame to inject: to node, claiming to be from node, the bytes.
pub struct Forged {
    /// Receiving node.
    pub to: usize,
    /// Node whose address the frame claims.
    pub from: usize,
    /// The frame.
    pub frame: Vec<u8>,
}

/// The forger.
pub struct Forger {
    keys: Option<CommKeys>,
    payload: u32,
    auth: Auth,
}

impl Forger {
    /// A forger without the secret, for fragments of `payload` bytes (the engines' MTU less
    /// header, trailer and MAC) to engines authenticating by `auth`.
    pub fn new(rng: &mut SimRng, payload: u32, auth: Auth) -> Forger {
        let mut own = [0u8; 32];
        own.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        Forger { keys: Some(CommKeys::with_auth(&Secret(own), auth)), payload, auth }
    }

    /// A forger holding the communicator's secret (the planted breach).
    pub fn with_real_key(payload: u32, auth: Auth) -> Forger {
        Forger { keys: None, payload, auth }
    }

    /// One forged message for a coming broadcast of `t` (and, one time in four, a forged
    /// control frame for it), aimed at one member.
    pub fn forge(&self, rng: &mut SimRng, t: &Target<'_>) -> Vec<Forged> {
        let real = CommKeys::with_auth(&t.secret, self.auth);
        let keys = self.keys.as_ref().unwrap_or(&real);
        let size = t.members.len() as u64;
        let k = rng.below(t.bcasts.len().max(1) as u64) as usize;
        let Some(&(root, len)) = t.bcasts.get(k) else { return Vec::new() };
        let bid = k as u32;
        let to = t.members[rng.below(size) as usize];
        // The claimed sender: the root (multicast), or any member (repair).
        let multicast = rng.chance(0.5);
        let claimed = if multicast { root } else { rng.below(size) as u32 };
        let from = t.members[claimed as usize];
        let Ok(geo) = Geometry::new(len, self.payload) else { return Vec::new() };
        let forged: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let mac = match self.auth {
            Auth::Mac => keys.message_mac(bid, root, &forged),
            // The call's MAC, over no byte of the message (what a `tag` root sends).
            Auth::Tag => keys.mac_state_in(bid, u64::from(len), 0, root, u64::from(bid)).finish(),
        };
        let count = geo.count();
        let first = count.saturating_sub(MAX_FORGED_FRAGS);
        let mut out = Vec::new();
        let mut frame = |kind: FrameKind, flags: u16, seq: u32, body: &[&[u8]]| {
            let h = WireHeader {
                version: self.auth.wire_version(),
                kind,
                flags: U16::new(flags),
                src_rank: U32::new(claimed),
                cookie: U64::new(t.cookie),
                bid: U32::new(bid),
                frag_seq: U32::new(seq),
                frag_count: U32::new(
                    if kind == FrameKind::DATA_MULTICAST || kind == FrameKind::DATA_REPAIR {
                        count
                    } else {
                        0
                    },
                ),
                total_len: U32::new(if kind == FrameKind::DATA_MULTICAST || kind == FrameKind::DATA_REPAIR {
                    len
                } else {
                    0
                }),
            };
            let mut buf =
                vec![0u8; WIRE_HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>() + WIRE_TRAILER_LEN];
            // Data frames as an engine tags them: under `tag` bound to the call — a plain
            // broadcast's context (0) and its root, which an insider knows.
            let data = kind == FrameKind::DATA_MULTICAST || kind == FrameKind::DATA_REPAIR;
            let binding = (data && self.auth == Auth::Tag).then(|| call_binding(0, root, u64::from(bid)));
            if let Ok(n) =
                emit(&mut buf, &h, body, |span| keys.data_tag(span, binding.as_ref()), crc32c::crc32c)
            {
                buf.truncate(n);
                out.push(Forged { to, from, frame: buf });
            }
        };
        let kind = if multicast { FrameKind::DATA_MULTICAST } else { FrameKind::DATA_REPAIR };
        for seq in first..count {
            let Some((off, n)) = geo.range(seq) else { continue };
            let data = &forged[off as usize..(off + n) as usize];
            let tail: &[u8] = if seq + 1 == count { &mac[..DIGEST_LEN] } else { &[] };
            // Repair copies claim one hop (phase 0): what an honest forwarder would send.
            frame(kind, if multicast { 0 } else { 1 }, seq, &[data, tail]);
        }
        if rng.chance(0.25) {
            if rng.chance(0.5) {
                frame(FrameKind::READY, READY_FLAG_ABORTED, 0, &[]);
            } else {
                let all = SyncBody {
                    epoch: U32::new(0),
                    base_bid: U32::new(0),
                    acked: U64::new(u64::MAX),
                    nacked: U64::new(0),
                    mcast_frags: U32::new(0),
                    total_frags: U32::new(0),
                    barrier: U64::new(0),
                    cut: U32::new(0),
                    flags: U32::new(0),
                };
                frame(FrameKind::SYNC_DOWN, 0, 0, &[all.as_bytes()]);
            }
        }
        out
    }
}
