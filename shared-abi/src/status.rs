//! Completion status codes: a `u16` newtype on the ABI, a Rust enum inside.
//!
//! Every way a descriptor can fail has its own code so that a host (or a firmware engineer
//! bringing up a board) learns *why* from the completion entry alone.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Raw status as stored in a [`crate::Completion`]. 0 is success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct Status(pub u16);

macro_rules! statuses {
    ($( $(#[$doc:meta])* $name:ident = $val:expr, $msg:expr; )*) => {
        /// Decoded status. `Status` values outside this list decode to `Err(raw)`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum StatusKind { $( $(#[$doc])* $name = $val, )* }

        impl StatusKind {
            /// Every status, in code order (for tables and tests).
            pub const ALL: &'static [StatusKind] = &[$(StatusKind::$name,)*];
            /// One-line human description.
            pub const fn message(self) -> &'static str {
                match self { $( StatusKind::$name => $msg, )* }
            }
        }

        impl TryFrom<Status> for StatusKind {
            type Error = Status;
            fn try_from(s: Status) -> Result<Self, Status> {
                match s.0 { $( $val => Ok(StatusKind::$name), )* _ => Err(s) }
            }
        }
    };
}

statuses! {
    /// The operation completed.
    Ok = 0, "ok";
    /// The opcode byte names no operation this engine knows.
    UnknownOpcode = 1, "unknown opcode";
    /// Length is zero where data is required, or above the engine's `max_op_bytes`.
    BadLength = 2, "length is zero or exceeds the engine limit";
    /// The region key is not registered (never, or already deregistered) for this host.
    UnknownRegion = 3, "region key is not registered";
    /// `offset + len` reaches outside the registered region (or overflows).
    OutOfBounds = 4, "offset/length outside the registered region";
    /// The region was registered without the access the operation needs (read for a source,
    /// write for a destination).
    AccessDenied = 5, "region lacks the required access (read/write)";
    /// Reserved flag bits were set.
    BadFlags = 6, "reserved descriptor flags are set";
    /// Fields that must be zero for this opcode were not.
    BadDescriptor = 7, "descriptor fields inconsistent with the opcode";
    /// The engine is shutting down; the operation was not executed.
    EngineShutdown = 8, "engine is shutting down";
    /// Source and destination ranges of a COPY overlap.
    Overlap = 9, "source and destination ranges overlap";
    /// The communicator handle names no communicator of this engine.
    UnknownCommunicator = 10, "unknown communicator";
    /// The root rank is not a member of the communicator.
    BadRoot = 11, "root rank outside the communicator";
    /// The message length differs from the root's (every rank must post the same length).
    LengthMismatch = 12, "message length differs from the root's";
    /// A rank this operation depends on stopped answering within the configured time.
    PeerUnreachable = 13, "a rank stopped answering";
    /// The communicator lost a member earlier; its collectives can no longer complete.
    CommunicatorBroken = 14, "communicator broken by an unreachable rank";
    /// The reassembled message failed its end-to-end digest: altered on its way, or the ranks
    /// posted different calls (another collective, element type or operation — the call is in
    /// the digest).
    DigestMismatch = 15, "reassembled message failed its end-to-end digest (altered, or the ranks posted different calls)";
    /// A rank's part could not be read — a root's buffer failed, or the rank's call was
    /// refused for its buffers (that rank ends with the refusal's status) — so the collective
    /// was aborted here.
    RootFailed = 16, "a rank's part could not be read (its buffer failed, or its call was refused for its buffers)";
    /// The posting host holds no rank in the communicator (every local rank of its engine was
    /// taken when it attached).
    NoRank = 17, "the posting process holds no rank in the communicator";
    /// The engine serves `max_comms` communicators already (the world included): free one
    /// first. A freed communicator's slot comes back once its broadcasts are settled with the
    /// other engines.
    TooManyCommunicators = 18, "the engine serves its maximum number of communicators";
    /// This process freed the communicator (`COMM_FREE`, `ringcast_comm_free`,
    /// `MPI_Comm_free`) while this collective was in flight on it, or another local member of
    /// it did before posting the collective the others posted: it can never complete. No rank
    /// was lost (that is [`StatusKind::CommunicatorBroken`]).
    CommunicatorFreed = 19, "communicator freed while this collective was in flight";
}

impl Status {
    /// Success.
    pub const OK: Status = Status(StatusKind::Ok as u16);

    /// True for [`StatusKind::Ok`].
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl From<StatusKind> for Status {
    fn from(k: StatusKind) -> Self {
        Status(k as u16)
    }
}
