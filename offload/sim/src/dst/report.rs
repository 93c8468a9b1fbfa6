//! What a DST run reports: [`Report`], the totals of a run that held every invariant, and
//! [`Violation`], the first invariant a run broke — what `ringcast dst` prints and a sweep
//! counts.
use ringcast_abi::StatusKind;
use ringcast_proto::Nanos;
/// What a passing run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Seed.
    pub seed: u64,
    /// Ranks.
    pub ranks: usize,
    /// Simulated nodes (engines).
    pub nodes: usize,
    /// Broadcast completions checked (communicator creation and release not included).
    pub completions: usize,
    /// Of which `Ok`.
    pub ok: usize,
    /// Of which 0-byte broadcasts, refused with `BadLength` as the ABI says.
    pub empty: usize,
    /// Datagrams delivered (to live nodes).
    pub delivered: u64,
    /// Virtual time at the end.
    pub virtual_ns: Nanos,
    /// Frames dropped (all reasons, all nodes).
    pub dropped: u64,
    /// Fragments received by multicast / by repair, over all non-root completions.
    pub frags_multicast: u64,
    /// See `frags_multicast`.
    pub frags_repair: u64,
    /// Sum of penalty rounds over non-root `Ok` completions, and their count.
    pub penalty_sum: u64,
    /// See `penalty_sum`.
    pub penalty_n: u64,
    /// Forged datagrams injected (0 when no coming broadcast offered the forger a target).
    pub forged: u64,
    /// Whether the scenario counted as benign (every broadcast had to succeed).
    pub benign: bool,
    /// `Ok` allgather completions, every block checked (counted in `ok` too).
    pub allgathers: u64,
    /// `Ok` allreduce completions, each result checked against the checker's own reduction
    /// (counted in `ok` too).
    pub allreduces: u64,
    /// `Ok` reduce completions, the root's result checked like an allreduce's and every other
    /// rank's 0 bytes (counted in `ok` too).
    pub reduces: u64,
    /// `Ok` scan and exscan completions, each rank's prefix checked against the checker's own
    /// reduction in rank order, an exscan's rank 0's 0 bytes (counted in `ok` too).
    pub scans: u64,
    /// `Ok` alltoall completions, every block checked (counted in `ok` too).
    pub alltoalls: u64,
    /// `Ok` barrier completions, each after every member's post (counted in `ok` too).
    pub barriers: u64,
    /// Calls refused for their buffers or a field their schedule does not read (`UnknownRegion`
    /// or `BadDescriptor` at their rank, checked).
    pub refused: u64,
    /// Of those, refused for a field (`BadDescriptor`).
    pub refused_fields: u64,
    /// Of those, refused for a field that shapes the call (`BadRoot`, `BadFlags`,
    /// `BadLength`), run in step once the engine learnt the shape from the others.
    pub refused_shapes: u64,
    /// Whether the engines' world was uneven (nodes holding different numbers of ranks).
    pub uneven: bool,
    /// Benign, every process detached at its end (finalized), and every engine was checked to
    /// owe nothing at the end: every last, partial epoch settled without padding.
    pub finalized: bool,
    /// Calls checked at ranks that made another call than the others (`dst/disagree.rs`).
    pub disagreements: u64,
}

/// An invariant that did not hold (`rank`: a scenario rank; `node`: a simulated node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The engine panicked.
    Panic(String),
    /// An `Ok` completion left bytes other than the root's in the rank's buffer (or an aborted
    /// broadcast ended `Ok`).
    WrongBytes { rank: usize, comm: usize, bcast: usize },
    /// A broadcast completed twice at one rank.
    DoubleCompletion { rank: usize, comm: usize, bcast: usize },
    /// A broadcast never completed (hang), or the run exceeded its event/time budget
    /// (`bcast`: `usize::MAX` for the communicator's creation or release).
    Hang { rank: usize, comm: usize, bcast: usize, at: Nanos },
    /// A benign scenario produced an error, or a 0-byte broadcast ended otherwise than
    /// `BadLength`.
    UnexpectedError { rank: usize, comm: usize, bcast: usize, status: StatusKind },
    /// Creating or freeing a communicator failed (both are local to a node: they never may).
    CommLife { rank: usize, comm: usize, status: StatusKind },
    /// A host's completions came out of the order of its descriptors (`cookie`: what came).
    OutOfOrder { rank: usize, cookie: u64 },
    /// A completion for no descriptor of its host, or with a status outside the ABI.
    Stray { node: usize, cookie: u64 },
    /// Protocol memory exceeded its configured bound.
    Memory { node: usize, bytes: usize, bound: usize },
    /// Injected foreign frames were not all counted as dropped.
    UncountedForeign { injected: usize, counted: u64 },
    /// Forged frames were not all dropped (for their tag or their cookie).
    UncountedForgery { injected: usize, counted: u64 },
    /// `inside` forged frames reached node `node` while it held the communicator they name,
    /// yet it counted only `bad_tags` frames dropped for their tag.
    ForgeryPastTheTag { node: usize, inside: u64, bad_tags: u64 },
    /// A barrier ended `Ok` at `rank` at `left`, before member `late` posted it (`arrived`;
    /// `Nanos::MAX`: never).
    EarlyBarrier { rank: usize, comm: usize, bcast: usize, left: Nanos, late: usize, arrived: Nanos },
    /// Every process of a benign scenario finished and detached (finalized), yet node `node`'s
    /// engine still owed its peers something when the run ended, or let a communicator go
    /// unsettled a peer timeout after its members left: a last, partial epoch that never
    /// settled (a real engine would linger a peer timeout at exit).
    Unsettled { node: usize },
}
