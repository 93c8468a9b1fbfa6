//! The `verbs` fabric's own framing in front of the protocol's datagram, in safe code with no
//! verbs in it: the header, the HELLO body of member discovery, the 40-byte GRH area that
//! starts every UD receive buffer, and the checked parse with a reason for every reject.
//!
//! # Frame (one UD message)
//!
//! ```text
//!  0      2    3    4          8            12                20      22      24
//!  | "RV" | ver| kind| job tag | member     | incarnation     | len   | flags | body (len)
//! ```
//!
//! All integers little-endian (like `shared-abi`'s wire header).
//! * `"RV"` ([`MAGIC`]), version [`VERSION`]: anything else is not this fabric's.
//! * `kind`: [`Kind::Data`] (the body is one protocol datagram) or [`Kind::Hello`] (the body is a
//!   [`Hello`] — the sender's address for unicast — followed by the known-members bitmap).
//! * `job tag`: 32 bits of SHA-256 over the job name ([`job_tag`]): another job's frames on a
//!   colliding multicast group, or a stray unicast, are refused before the protocol sees them
//!   (whose 64-bit cookie is the second line).
//! * `member`: the sender's member number (`RINGCAST_NODE`), `incarnation`: a value the sender
//!   drew at start (its start time in nanoseconds), larger after a restart. UD tells a receiver
//!   the sending QP number but not which member that is: the member number says who, and the
//!   peer table ([`super::peers`]) checks that the QP number fits that member's incarnation.
//! * `len`: the body's length; a message is exactly header + body (UD does not pad).
//! * `flags`: for a HELLO, [`HELLO_NEED`] (the sender misses members: answer it) and
//!   [`HELLO_REPLY`] (this is such an answer); zero for DATA.
//!
//! # HELLO body (version 2)
//!
//! ```text
//!  0       16     20    22    24
//!  | GID   | QPN  | LID | 0   | known-members bitmap (0 or more bytes)
//! ```
//!
//! Bit `m % 8` of bitmap byte `m / 8` is set when the sender can send to member `m` (it knows
//! the member's address and has an address handle for it; its own bit is set too). A NEED's
//! bitmap tells every member that hears it whether to answer ([`known`]): only the members it
//! misses do. The bitmap covers `nodes` members, or as many as fit the sender's `mtu`; a member
//! beyond its end is "not said" (`None`), and answers rate-limited.
//!
//! # Receive buffers
//!
//! A UD receive completion's data starts with [`GRH_LEN`] bytes reserved for the Global Route
//! Header (valid or not: the space is always consumed); the frame follows. [`parse_received`]
//! takes the whole buffer as the completion reports it (`byte_len` bytes).
//!
//! # Contract of the parsers
//!
//! [`parse`] and [`parse_received`] take any byte string and return the header and a body that
//! is a sub-slice of the input, or a [`Reject`]; they never panic and never read outside the
//! input. A DATA body is at most the MTU; a HELLO body is at least [`HELLO_LEN`] bytes (later
//! versions may append).
use sha2::{Digest, Sha256};

/// First two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"RV";
/// Format version (2: HELLO bodies carry the known-members bitmap).
pub const VERSION: u8 = 2;
/// Header bytes in front of every body.
pub const HEADER_LEN: usize = 24;
/// Bytes of every UD receive buffer reserved for the Global Route Header.
pub const GRH_LEN: usize = 40;
/// HELLO body: GID (16), QP number (4), LID (2), reserved (2).
pub const HELLO_LEN: usize = 24;
/// A HELLO's sender misses members and asks every member that hears it for a unicast HELLO.
pub const HELLO_NEED: u16 = 1;
/// A HELLO sent as an answer to one with [`HELLO_NEED`].
pub const HELLO_REPLY: u16 = 2;
/// Bytes of a known-members bitmap of `nodes` members.
pub fn bitmap_len(nodes: u32) -> usize {
    (nodes as usize).div_ceil(8)
}

/// What a HELLO body's bitmap (the bytes after the [`Hello`] address) says about `member`:
/// whether its sender knows it, or `None` when the bitmap does not reach that far.
pub fn known(body: &[u8], member: u32) -> Option<bool> {
    let bitmap = body.get(HELLO_LEN..)?;
    let byte = bitmap.get(member as usize / 8)?;
    Some(byte & (1 << (member % 8)) != 0)
}

/// Sets `member`'s bit in `bitmap` (ignored beyond its end).
pub fn set_known(bitmap: &mut [u8], member: u32) {
    if let Some(b) = bitmap.get_mut(member as usize / 8) {
        *b |= 1 << (member % 8);
    }
}

/// The longest body the length field describes.
pub const MAX_BODY: usize = u16::MAX as usize;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One protocol datagram.
    Data,
    /// The sender's unicast address ([`Hello`]).
    Hello,
}

impl Kind {
    /// The wire value.
    pub fn to_wire(self) -> u8 {
        match self {
            Kind::Data => 1,
            Kind::Hello => 2,
        }
    }

    /// The kind of wire value `v`, if it is one.
    pub fn from_wire(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Data),
            2 => Some(Kind::Hello),
            _ => None,
        }
    }
}

/// The fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the body is.
    pub kind: Kind,
    /// [`job_tag`] of the sender's job.
    pub job: u32,
    /// The sender's member number.
    pub member: u32,
    /// The sender's incarnation.
    pub incarnation: u64,
    /// Body length.
    pub len: u16,
    /// [`HELLO_NEED`], [`HELLO_REPLY`].
    pub flags: u16,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.kind.to_wire();
        b[4..8].copy_from_slice(&self.job.to_le_bytes());
        b[8..12].copy_from_slice(&self.member.to_le_bytes());
        b[12..20].copy_from_slice(&self.incarnation.to_le_bytes());
        b[20..22].copy_from_slice(&self.len.to_le_bytes());
        b[22..24].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
}

/// A member's unicast address, as its HELLO announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hello {
    /// The port's GID at the fabric's GID index.
    pub gid: [u8; 16],
    /// The UD queue pair's number (24 bits).
    pub qpn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
}

impl Hello {
    /// The body's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..16].copy_from_slice(&self.gid);
        b[16..20].copy_from_slice(&self.qpn.to_le_bytes());
        b[20..22].copy_from_slice(&self.lid.to_le_bytes());
        b
    }

    /// Reads a body: at least [`HELLO_LEN`] bytes, a QP number within 24 bits.
    pub fn decode(body: &[u8]) -> Result<Hello, Reject> {
        let Some(b) = body.first_chunk::<HELLO_LEN>() else { return Err(Reject::Hello) };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[0..16]);
        let qpn = u32::from_le_bytes([b[16], b[17], b[18], b[19]]);
        if qpn >= 1 << 24 {
            return Err(Reject::Hello);
        }
        Ok(Hello { gid, qpn, lid: u16::from_le_bytes([b[20], b[21]]) })
    }
}

/// Why a received message was not delivered (or not taken as a HELLO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than the GRH area every UD receive buffer starts with.
    Grh,
    /// Shorter than the header.
    Short,
    /// Not this fabric's magic.
    Magic,
    /// Another version of the format.
    Version,
    /// An unknown kind.
    Kind,
    /// Another job's frame.
    Job,
    /// The length field disagrees with the message's length.
    Length,
    /// A DATA body above the MTU.
    Oversize,
    /// A HELLO body too short, or with a QP number above 24 bits.
    Hello,
    /// A member number outside `0..nodes`.
    Member,
    /// This member's own frame (multicast loops back to the sending QP when it is attached).
    Own,
    /// Another process claims this member's number (two engines started as the same node).
    Impostor,
    /// From an earlier incarnation of a member that restarted since.
    Stale,
    /// The member's QP number is not the one its incarnation announced (two processes claim
    /// one member number, or a HELLO names a QP other than the one that sent it).
    Conflict,
}

impl Reject {
    /// Every reason, in counter order ([`Reject::index`]).
    pub const ALL: [Reject; 14] = [
        Reject::Grh,
        Reject::Short,
        Reject::Magic,
        Reject::Version,
        Reject::Kind,
        Reject::Job,
        Reject::Length,
        Reject::Oversize,
        Reject::Hello,
        Reject::Member,
        Reject::Own,
        Reject::Impostor,
        Reject::Stale,
        Reject::Conflict,
    ];

    /// Position in [`Reject::ALL`] (counter arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short name for logs and `ringcast` output.
    pub fn name(self) -> &'static str {
        match self {
            Reject::Grh => "grh",
            Reject::Short => "short",
            Reject::Magic => "magic",
            Reject::Version => "version",
            Reject::Kind => "kind",
            Reject::Job => "job",
            Reject::Length => "length",
            Reject::Oversize => "oversize",
            Reject::Hello => "hello",
            Reject::Member => "member",
            Reject::Own => "own",
            Reject::Impostor => "impostor",
            Reject::Stale => "stale",
            Reject::Conflict => "conflict",
        }
    }
}

/// The tag of job `job` in every frame's header.
pub fn job_tag(job: &str) -> u32 {
    let h = Sha256::digest(format!("ringcast verbs fabric of job {job}").as_bytes());
    u32::from_le_bytes([h[0], h[1], h[2], h[3]])
}

/// Checks a frame (without GRH) of job `job` with DATA bodies of at most `mtu` bytes; see the
/// module doc.
pub fn parse(frame: &[u8], job: u32, mtu: usize) -> Result<(Header, &[u8]), Reject> {
    let Some((h, body)) = frame.split_first_chunk::<HEADER_LEN>() else { return Err(Reject::Short) };
    if h[0..2] != MAGIC {
        return Err(Reject::Magic);
    }
    if h[2] != VERSION {
        return Err(Reject::Version);
    }
    let kind = Kind::from_wire(h[3]).ok_or(Reject::Kind)?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let header = Header {
        kind,
        job: u32_at(4),
        member: u32_at(8),
        incarnation: u64::from(u32_at(12)) | u64::from(u32_at(16)) << 32,
        len: u16::from_le_bytes([h[20], h[21]]),
        flags: u16::from_le_bytes([h[22], h[23]]),
    };
    if header.job != job {
        return Err(Reject::Job);
    }
    if usize::from(header.len) != body.len() {
        return Err(Reject::Length);
    }
    match kind {
        Kind::Data if body.len() > mtu => Err(Reject::Oversize),
        Kind::Hello if body.len() < HELLO_LEN => Err(Reject::Hello),
        _ => Ok((header, body)),
    }
}

/// [`parse`] of a receive buffer as a UD completion reports it: the GRH area, then the frame.
pub fn parse_received(received: &[u8], job: u32, mtu: usize) -> Result<(Header, &[u8]), Reject> {
    let frame = received.get(GRH_LEN..).ok_or(Reject::Grh)?;
    parse(frame, job, mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: u32 = 0x1234_5678;

    fn header(kind: Kind, len: usize) -> Header {
        Header { kind, job: JOB, member: 2, incarnation: 0x0102_0304_0506_0708, len: len as u16, flags: 0 }
    }

    fn frame(h: Header, body: &[u8]) -> Vec<u8> {
        let mut f = h.encode().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn frames_round_trip() {
        for len in [0usize, 1, 100, 1000] {
            let body: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let h = header(Kind::Data, len);
            let f = frame(h, &body);
            assert_eq!(f.len(), HEADER_LEN + len);
            assert_eq!(parse(&f, JOB, 1000), Ok((h, &body[..])));
            let mut received = vec![0xAB; GRH_LEN];
            received.extend_from_slice(&f);
            assert_eq!(parse_received(&received, JOB, 1000), Ok((h, &body[..])));
        }
        let hello = Hello { gid: [0xfe; 16], qpn: 0x00ab_cdef, lid: 7 };
        let h = Header { flags: HELLO_NEED, ..header(Kind::Hello, HELLO_LEN) };
        let f = frame(h, &hello.encode());
        let (got, body) = parse(&f, JOB, 0).expect("hello");
        assert_eq!((got, Hello::decode(body)), (h, Ok(hello)));
    }

    #[test]
    fn golden_frames() {
        // fixtures/verbs-frames.hex: the format cannot change unnoticed.
        let golden = include_str!("../../../../../fixtures/verbs-frames.hex");
        let hex = |name: &str| {
            let line = golden
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("golden frame {name} missing"));
            let h = line.split_whitespace().nth(1).unwrap_or_default();
            (0..h.len() / 2)
                .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0))
                .collect::<Vec<u8>>()
        };
        let data = frame(header(Kind::Data, 5), b"hello");
        assert_eq!(data, hex("data"), "data frame");
        let hello = Hello { gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1], qpn: 0x123, lid: 0 };
        // Member 2 of 10, knowing members 0 and 2 (itself) and 9.
        let mut body = hello.encode().to_vec();
        let mut bitmap = vec![0u8; bitmap_len(10)];
        for m in [0, 2, 9] {
            set_known(&mut bitmap, m);
        }
        body.extend_from_slice(&bitmap);
        let h = Header { flags: HELLO_NEED, ..header(Kind::Hello, body.len()) };
        assert_eq!(frame(h, &body), hex("hello_need"), "hello frame");
        assert_eq!(
            job_tag("default"),
            u32::from_le_bytes(hex("job_tag_default")[..4].try_into().unwrap_or([0; 4]))
        );
    }

    #[test]
    fn rejects_have_reasons() {
        let body = [7u8; 10];
        let good = frame(header(Kind::Data, 10), &body);
        assert!(parse(&good, JOB, 10).is_ok());
        assert_eq!(parse(&good, JOB, 9), Err(Reject::Oversize));
        assert_eq!(parse(&good, JOB + 1, 10), Err(Reject::Job));
        assert_eq!(parse(&good[..HEADER_LEN - 1], JOB, 10), Err(Reject::Short));
        assert_eq!(parse(&good[..good.len() - 1], JOB, 10), Err(Reject::Length), "truncated");
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(parse(&longer, JOB, 10), Err(Reject::Length), "trailing bytes");
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(parse(&bad, JOB, 10), Err(Reject::Magic));
        let mut bad = good.clone();
        bad[2] = 1;
        assert_eq!(parse(&bad, JOB, 10), Err(Reject::Version), "version 1: HELLOs without bitmap");
        let mut bad = good.clone();
        bad[3] = 9;
        assert_eq!(parse(&bad, JOB, 10), Err(Reject::Kind));
        assert_eq!(parse_received(&[0; GRH_LEN - 1], JOB, 10), Err(Reject::Grh));
        assert_eq!(parse_received(&[0; GRH_LEN], JOB, 10), Err(Reject::Short));
        // A HELLO body too short, or with a QP number beyond 24 bits.
        let short = frame(header(Kind::Hello, HELLO_LEN - 1), &[0; HELLO_LEN - 1]);
        assert_eq!(parse(&short, JOB, 10), Err(Reject::Hello));
        let mut body = Hello { gid: [0; 16], qpn: 1, lid: 0 }.encode();
        body[19] = 1;
        assert_eq!(Hello::decode(&body), Err(Reject::Hello));
        assert_eq!(Hello::decode(&[0; 3]), Err(Reject::Hello));
        assert_eq!(Reject::ALL.iter().map(|r| r.index()).collect::<Vec<_>>(), (0..14).collect::<Vec<_>>());
        let names: std::collections::HashSet<_> = Reject::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Reject::ALL.len());
    }

    #[test]
    fn the_known_members_bitmap_answers_per_member() {
        let mut body = Hello { gid: [1; 16], qpn: 5, lid: 0 }.encode().to_vec();
        assert_eq!(known(&body, 0), None, "no bitmap");
        assert_eq!(known(&body[..3], 0), None, "not even an address");
        let mut bitmap = vec![0u8; bitmap_len(12)];
        assert_eq!(bitmap.len(), 2);
        for m in [1, 8, 11, 16, 4096] {
            set_known(&mut bitmap, m); // 16 and 4096 lie beyond: ignored
        }
        assert_eq!(bitmap, [0b0000_0010, 0b0000_1001]);
        body.extend_from_slice(&bitmap);
        let said: Vec<Option<bool>> = (0..17).map(|m| known(&body, m)).collect();
        assert_eq!(&said[..2], [Some(false), Some(true)]);
        assert_eq!(&said[8..12], [Some(true), Some(false), Some(false), Some(true)]);
        assert_eq!(said[12], Some(false), "inside the last byte");
        assert_eq!(said[16], None, "beyond the bitmap");
        assert_eq!(known(&body, u32::MAX), None);
        assert_eq!((bitmap_len(0), bitmap_len(1), bitmap_len(4096)), (0, 1, 512));
    }

    #[test]
    fn job_tags_differ_between_jobs() {
        assert_ne!(job_tag("a"), job_tag("b"));
        assert_eq!(job_tag("a"), job_tag("a"));
    }

    #[test]
    fn no_input_makes_the_parser_panic() {
        let hello = Hello { gid: [1; 16], qpn: 5, lid: 1 };
        let mut received = vec![0u8; GRH_LEN];
        received
            .extend(frame(Header { flags: HELLO_REPLY, ..header(Kind::Hello, HELLO_LEN) }, &hello.encode()));
        for cut in 0..=received.len() {
            let _ = parse_received(&received[..cut], JOB, 64);
        }
        for i in GRH_LEN..received.len() {
            for bit in 0..8 {
                let mut r = received.clone();
                r[i] ^= 1 << bit;
                if let Ok((h, body)) = parse_received(&r, JOB, 64) {
                    assert_eq!(usize::from(h.len), body.len());
                    let _ = Hello::decode(body);
                }
            }
        }
    }
}
