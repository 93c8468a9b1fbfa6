//! The engine's one configuration struct: every limit and knob, its documented default, and its
//! `RINGCAST_*` environment override.
//!
//! [`tunables!`] declares each tunable once and derives from that declaration the struct, its
//! `Default`, the environment parser and the table `ringcast info` prints, so the documentation
//! a user reads is the code that runs. Capacities are fixed at engine start: tables are sized
//! from these values once and never grow (no allocation after start-up).
use std::fmt;
use std::str::FromStr;

/// Which fabric the engine's broadcasts travel on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FabricKind {
    /// No fabric: the engine serves NOP and COPY only; BCAST fails with `UnknownCommunicator`.
    #[default]
    None,
    /// The shared-memory emulation NIC (every node on this machine).
    Shm,
    /// Kernel UDP: multicast to the group's `ff15::`/`239/8` address, unicast between the
    /// members listed in `udp_members`.
    Udp,
    /// Ethernet frames through a DPDK port (`dpdk_vdev`): multicast MACs for the groups, unicast
    /// between the members (by MAC) listed in `dpdk_members`.
    Dpdk,
    /// A UD queue pair on an RDMA port (`verbs_device`, `verbs_port`): multicast groups joined
    /// through rdmacm, unicast to members found by discovery.
    Verbs,
}

impl FromStr for FabricKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(FabricKind::None),
            "shm" => Ok(FabricKind::Shm),
            "udp" => Ok(FabricKind::Udp),
            "dpdk" => Ok(FabricKind::Dpdk),
            "verbs" => Ok(FabricKind::Verbs),
            _ => Err(format!("expected none, shm, udp, dpdk or verbs, got {s:?}")),
        }
    }
}

impl fmt::Display for FabricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FabricKind::None => "none",
            FabricKind::Shm => "shm",
            FabricKind::Udp => "udp",
            FabricKind::Dpdk => "dpdk",
            FabricKind::Verbs => "verbs",
        })
    }
}

/// A host process's rank among its engine's local processes: given by the launcher, or the
/// lowest free one taken at attach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocalRank {
    /// The engine assigns the lowest free local rank at attach (none when all `ppn` are taken;
    /// such a host can still COPY, but not take part in a broadcast).
    #[default]
    Auto,
    /// This local rank (`0..ppn`).
    Fixed(u32),
}

impl FromStr for LocalRank {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(LocalRank::Auto),
            n => n.parse().map(LocalRank::Fixed).map_err(|_| format!("expected auto or a number, got {s:?}")),
        }
    }
}

impl fmt::Display for LocalRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalRank::Auto => f.write_str("auto"),
            LocalRank::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// How the polling loop behaves when it finds no work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Spin without pause: lowest latency, one core fully used. For a dedicated DPU core or an
    /// isolated host core.
    Spin,
    /// Spin for `idle_spins` empty polls, then `sched_yield` on every empty poll, then sleep
    /// `idle_sleep_us` after `idle_yields` more: for machines with fewer cores than pollers.
    SpinYield,
    /// `Spin` when the machine has at least 4 CPUs, `SpinYield` otherwise.
    Auto,
}

impl FromStr for PollMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "spin" => Ok(PollMode::Spin),
            "spin-yield" | "yield" => Ok(PollMode::SpinYield),
            "auto" => Ok(PollMode::Auto),
            _ => Err(format!("expected spin, spin-yield or auto, got {s:?}")),
        }
    }
}

impl fmt::Display for PollMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PollMode::Spin => "spin",
            PollMode::SpinYield => "spin-yield",
            PollMode::Auto => "auto",
        })
    }
}

impl PollMode {
    /// `Auto` decided for this machine.
    pub fn resolve(self) -> PollMode {
        match self {
            PollMode::Auto => {
                // `available_parallelism` reads cgroup files (tens of µs); hosts resolve the mode
                // on every blocking call, so the answer is computed once per process.
                static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
                let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
                if cpus >= 4 {
                    PollMode::Spin
                } else {
                    PollMode::SpinYield
                }
            }
            m => m,
        }
    }
}

/// Which CPU the polling thread is pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinCpu {
    /// Not pinned.
    None,
    /// The highest-numbered CPU the process may run on (hosts usually start on low CPUs).
    Auto,
    /// This CPU.
    Cpu(usize),
}

impl FromStr for PinCpu {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(PinCpu::None),
            "auto" => Ok(PinCpu::Auto),
            n => n
                .parse()
                .map(PinCpu::Cpu)
                .map_err(|_| format!("expected none, auto or a CPU number, got {s:?}")),
        }
    }
}

impl fmt::Display for PinCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinCpu::None => f.write_str("none"),
            PinCpu::Auto => f.write_str("auto"),
            PinCpu::Cpu(n) => write!(f, "{n}"),
        }
    }
}

/// The job's secret (`RINGCAST_JOB_SECRET`, 64 hex digits): keys the world communicator's frames
/// (docs/protocol.md, "Integrity and authenticity"). The launcher (`ringcast run`, the MPI
/// interposer) draws it from the CSPRNG and hands it to every engine of the job; it never
/// travels on the fabric and is never printed (`Display` says only whether it is set).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct JobSecret(pub Option<[u8; 32]>);

impl JobSecret {
    /// Hex form, as the environment variable carries it.
    pub fn to_hex(bytes: &[u8; 32]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl FromStr for JobSecret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(JobSecret(None));
        }
        let bad = || "expected 64 hex digits (32 bytes), not all zero".to_string();
        if s.len() != 64 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        if out == [0; 32] {
            return Err(bad());
        }
        Ok(JobSecret(Some(out)))
    }
}

impl fmt::Display for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "set (hidden)" } else { "" })
    }
}

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobSecret({})", if self.0.is_some() { "set" } else { "unset" })
    }
}

/// How long a broadcast's root waits before it multicasts (Hoefler et al. §3.1): receivers that
/// have not posted yet lose multicast datagrams beyond their pre-posted slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootDelay {
    /// Multicast at once.
    None,
    /// Wait this many microseconds.
    Fixed(u32),
    /// Randomized single-process synchronization: the root waits for the "ready" of one non-root
    /// rank picked per broadcast from the communicator's seed.
    Random,
    /// Learned: the picked rank's "ready" is a sample of how late receivers arrive (the root does
    /// not wait for it); the root waits the moving average of those lags, times a factor the
    /// multicast hit rate measured by the synchronization tunes.
    Adaptive,
}

impl FromStr for RootDelay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(RootDelay::None),
            "random" => Ok(RootDelay::Random),
            "adaptive" => Ok(RootDelay::Adaptive),
            _ => match s.strip_prefix("fixed:").map(str::parse) {
                Some(Ok(us)) => Ok(RootDelay::Fixed(us)),
                _ => Err(format!("expected none, fixed:<microseconds>, random or adaptive, got {s:?}")),
            },
        }
    }
}

impl fmt::Display for RootDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootDelay::None => f.write_str("none"),
            RootDelay::Fixed(us) => write!(f, "fixed:{us}"),
            RootDelay::Random => f.write_str("random"),
            RootDelay::Adaptive => f.write_str("adaptive"),
        }
    }
}

/// Which broadcast algorithm the engine uses: chosen per call by the cost model
/// ([`crate::model::select::Selector`]), or one forced for every broadcast (experiments, or a
/// fabric the model describes badly).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlgorithmChoice {
    /// The cheapest predicted algorithm for each call's size, length and placement.
    #[default]
    Auto,
    /// Always this one (a forced multicast still falls back when the fabric cannot multicast).
    Fixed(crate::proto::algo::Algorithm),
}

impl AlgorithmChoice {
    /// The forced algorithm, if any.
    pub fn forced(self) -> Option<crate::proto::algo::Algorithm> {
        match self {
            AlgorithmChoice::Auto => None,
            AlgorithmChoice::Fixed(a) => Some(a),
        }
    }
}

impl FromStr for AlgorithmChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use crate::proto::algo::Algorithm;
        if s == "auto" {
            return Ok(AlgorithmChoice::Auto);
        }
        Algorithm::from_name(s).map(AlgorithmChoice::Fixed).ok_or_else(|| {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!("expected auto or one of {}, got {s:?}", names.join(", "))
        })
    }
}

impl fmt::Display for AlgorithmChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgorithmChoice::Auto => f.write_str("auto"),
            AlgorithmChoice::Fixed(a) => f.write_str(a.name()),
        }
    }
}

/// One row of `ringcast info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunableRow {
    /// Field name.
    pub name: &'static str,
    /// Environment variable that overrides it.
    pub env: &'static str,
    /// Default, rendered.
    pub default: String,
    /// Value in this configuration, rendered.
    pub current: String,
    /// What it means.
    pub meaning: &'static str,
}

/// A tunable's environment value did not parse, or the values break a relationship.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `RINGCAST_X=...` could not be parsed.
    #[error("{env}={value:?}: {reason}")]
    Parse {
        /// Variable name.
        env: &'static str,
        /// Its value.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// Values parse but do not fit together or exceed a hard limit.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

macro_rules! tunables {
    ($( $(#[$doc:meta])* $name:ident : $ty:ty = $default:expr, $env:literal, $meaning:literal; )*) => {
        /// Every engine limit and knob. See the field docs, `ringcast info`, or `docs/tunables.md`.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Config {
            $( $(#[$doc])* #[doc = concat!("\n\nEnvironment: `", $env, "`.")] pub $name: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $name: $default, )* }
            }
        }

        impl Config {
            /// Defaults overridden by every `RINGCAST_*` variable that is set, then validated.
            pub fn from_env() -> Result<Config, ConfigError> {
                Self::from_lookup(|k| std::env::var(k).ok())
            }

            /// Like [`Config::from_env`] with an explicit variable source (tests, the CLI).
            pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
                let mut c = Config::default();
                $(
                    if let Some(v) = get($env) {
                        c.$name = v.trim().parse::<$ty>().map_err(|e| ConfigError::Parse {
                            env: $env, value: v.clone(), reason: e.to_string(),
                        })?;
                    }
                )*
                c.validate()?;
                Ok(c)
            }

            /// Every tunable with its default, current value and meaning.
            pub fn describe(&self) -> Vec<TunableRow> {
                let d = Config::default();
                vec![ $( TunableRow {
                    name: stringify!($name), env: $env,
                    default: d.$name.to_string(), current: self.$name.to_string(), meaning: $meaning,
                }, )* ]
            }
        }
    };
}

tunables! {
    /// Entries in each host's submission ring and in its completion ring.
    ring_entries: u32 = 256, "RINGCAST_RING_ENTRIES",
        "entries in each host's submission and completion ring (power of two, 2..=max_ring_entries)";
    /// Largest ring a host may ask for at attach.
    max_ring_entries: u32 = 16384, "RINGCAST_MAX_RING_ENTRIES",
        "largest ring a host may request at attach";
    /// Host processes one engine serves at once.
    max_hosts: u32 = 64, "RINGCAST_MAX_HOSTS",
        "host processes one engine serves at once";
    /// Registered regions per host.
    max_regions: u32 = 256, "RINGCAST_MAX_REGIONS",
        "registered memory regions per host process";
    /// Largest single registered region.
    max_region_bytes: u64 = 1 << 36, "RINGCAST_MAX_REGION_BYTES",
        "largest registered region in bytes (default 64 GiB)";
    /// Shared memory one host may have the engine map.
    max_host_bytes: u64 = 1 << 36, "RINGCAST_MAX_HOST_BYTES",
        "shared memory (sum of distinct segment sizes) one host may have the engine map (default 64 GiB); bounds the engine's address space, and the pages its DMA faults in, per host";
    /// Largest byte count one descriptor may name.
    max_op_bytes: u64 = 1 << 30, "RINGCAST_MAX_OP_BYTES",
        "largest byte count of one descriptor; above it the descriptor completes with BadLength";
    /// DMA bytes per host per pass.
    dma_pass_bytes: u64 = 1 << 20, "RINGCAST_DMA_PASS_BYTES",
        "DMA bytes moved for one host per polling pass; a larger copy continues in later passes so other hosts and control traffic are never stalled";
    /// Descriptors taken from one host per loop iteration.
    burst: u32 = 32, "RINGCAST_BURST",
        "descriptors consumed from one host per polling iteration (fairness between hosts)";
    /// Idle behaviour of the polling loop.
    poll_mode: PollMode = PollMode::Auto, "RINGCAST_POLL_MODE",
        "idle behaviour: spin, spin-yield (for fewer cores than pollers) or auto";
    /// Empty polls before the loop starts yielding.
    idle_spins: u32 = 2000, "RINGCAST_IDLE_SPINS",
        "empty polls before a spin-yield loop starts to sched_yield";
    /// Yielding empty polls before the loop sleeps.
    idle_yields: u32 = 20000, "RINGCAST_IDLE_YIELDS",
        "yielding empty polls before a spin-yield loop sleeps idle_sleep_us";
    /// Sleep of a long-idle spin-yield loop.
    idle_sleep_us: u32 = 50, "RINGCAST_IDLE_SLEEP_US",
        "sleep of a long-idle spin-yield loop in microseconds (bounds wake-up latency when idle)";
    /// CPU the polling thread is pinned to.
    pin_cpu: PinCpu = PinCpu::Auto, "RINGCAST_PIN_CPU",
        "CPU the engine's polling thread is pinned to: none, auto (highest allowed CPU) or a number";
    /// How often control sockets are polled.
    ctl_poll_us: u32 = 100, "RINGCAST_CTL_POLL_US",
        "interval between polls of control sockets (attach, register, host death) in microseconds";
    /// Time a new connection has to send ATTACH.
    attach_timeout_ms: u32 = 2000, "RINGCAST_ATTACH_TIMEOUT_MS",
        "a connection that has not sent ATTACH within this many milliseconds is closed (idle connections cannot hold host slots)";
    /// Connections kept at once before they ATTACH.
    max_pending_conns: u32 = 256, "RINGCAST_MAX_PENDING_CONNS",
        "connections an engine keeps at once before they send ATTACH; a new one past that closes the oldest (idle connections cannot delay a host)";
    /// Host-side limit on a control request.
    ctl_timeout_ms: u32 = 10000, "RINGCAST_CTL_TIMEOUT_MS",
        "host library: milliseconds to wait for the engine's reply to attach/register/deregister/stats";
    /// Largest datagram on the fabric.
    mtu: u32 = 1472, "RINGCAST_MTU",
        "largest datagram in bytes (header 32 + payload + trailer 12: tag 8, CRC 4); 1472 = UDP over 1500-byte Ethernet";
    /// Largest broadcast message.
    max_message_bytes: u32 = 4 << 20, "RINGCAST_MAX_MESSAGE_BYTES",
        "largest broadcast message in bytes (its fragments must fit the 8192-fragment bitmap)";
    /// Broadcast channels per communicator.
    channels: u32 = 16, "RINGCAST_CHANNELS",
        "broadcast channels per communicator: broadcasts in flight before a delayed synchronization must free one (Yu et al.)";
    /// Pre-posted receive slots.
    preposted_slots: u32 = 5, "RINGCAST_PREPOSTED_SLOTS",
        "fragments kept per communicator for broadcasts this rank has not posted yet (the n pre-posted receives of Hoefler et al.)";
    /// Size below which a communicator uses point-to-point broadcast.
    small_comm: u32 = 20, "RINGCAST_SMALL_COMM",
        "communicators smaller than this broadcast point-to-point (binomial; linear up to 4 ranks) instead of multicast";
    /// Root delay mode.
    root_delay: RootDelay = RootDelay::None, "RINGCAST_ROOT_DELAY",
        "root delay before the multicast: none, fixed:<us>, random (wait for one picked rank's ready) or adaptive";
    /// Ceiling of the adaptive root delay.
    root_delay_max_us: u32 = 100, "RINGCAST_ROOT_DELAY_MAX_US",
        "largest delay the adaptive root delay may choose, in microseconds";
    /// First repair request timeout.
    repair_timeout_us: u32 = 500, "RINGCAST_REPAIR_TIMEOUT_US",
        "microseconds without progress before an incomplete rank asks its repair source for missing fragments (doubles per retry)";
    /// Cap of the repair back-off.
    repair_backoff_max_us: u32 = 50_000, "RINGCAST_REPAIR_BACKOFF_MAX_US",
        "largest interval between repair requests in microseconds";
    /// Requests to the repair source before asking the root.
    escalate_after: u32 = 3, "RINGCAST_ESCALATE_AFTER",
        "unanswered repair requests to the ring predecessor before asking the root directly (fail-over to point-to-point)";
    /// Time after which a silent rank is declared unreachable.
    peer_timeout_ms: u32 = 2000, "RINGCAST_PEER_TIMEOUT_MS",
        "milliseconds without progress after which an operation fails with PeerUnreachable and the communicator is broken";
    /// Message size from which repair is selective.
    selective_repair_bytes: u32 = 65536, "RINGCAST_SELECTIVE_REPAIR_BYTES",
        "messages from this size use selective ring repair (only missing fragments travel); smaller ones forward everything";
    /// Communicators per engine.
    max_comms: u32 = 64, "RINGCAST_MAX_COMMS",
        "communicators one engine serves at once";
    /// Injected datagram loss.
    fault_drop: f64 = 0.0, "RINGCAST_FAULT_DROP",
        "fault injection (release builds, every fabric): probability a datagram is dropped";
    /// Injected bit corruption.
    fault_corrupt: f64 = 0.0, "RINGCAST_FAULT_CORRUPT",
        "fault injection: probability a datagram gets one bit flipped (the CRC catches it)";
    /// Injected duplication.
    fault_duplicate: f64 = 0.0, "RINGCAST_FAULT_DUPLICATE",
        "fault injection: probability a datagram is delivered twice";
    /// Injected reordering.
    fault_reorder: f64 = 0.0, "RINGCAST_FAULT_REORDER",
        "fault injection: probability a datagram is held back so later ones overtake it";
    /// Injected delay.
    fault_delay_us: u32 = 0, "RINGCAST_FAULT_DELAY_US",
        "fault injection: extra delay of every affected datagram in microseconds";
    /// Direction of the injected faults.
    fault_direction: crate::fault::FaultDirection = crate::fault::FaultDirection::Both, "RINGCAST_FAULT_DIRECTION",
        "fault injection: tx, rx or both";
    /// Frame kinds the faults hit.
    fault_kinds: crate::fault::FrameKinds = crate::fault::FrameKinds::ALL, "RINGCAST_FAULT_KINDS",
        "fault injection: comma list of mcast, repair, ready, sync, retransmit, or all";
    /// Seed of the injected faults.
    fault_seed: u64 = 0, "RINGCAST_FAULT_SEED",
        "fault injection: seed (0 = from the process id), so a rehearsal can be repeated";
    /// Broadcast algorithm: chosen by the cost model, or forced.
    algorithm: AlgorithmChoice = AlgorithmChoice::Auto, "RINGCAST_ALGORITHM",
        "broadcast algorithm: auto (cheapest predicted by the cost model per call) or multicast, linear, binomial, chain, binary, scatter-allgather, dual-tree, hierarchical";
    /// Cost model: inter-node latency.
    model_latency_ns: f64 = 1000.0, "RINGCAST_MODEL_LATENCY_NS",
        "cost model: LogGP L of the inter-node link, wire and switch latency of a datagram in nanoseconds";
    /// Cost model: per-datagram engine overhead.
    model_overhead_ns: f64 = 300.0, "RINGCAST_MODEL_OVERHEAD_NS",
        "cost model: LogGP o, engine time per datagram sent or received in nanoseconds";
    /// Cost model: time per byte on one lane.
    model_ns_per_byte: f64 = 0.08, "RINGCAST_MODEL_NS_PER_BYTE",
        "cost model: LogGP G, nanoseconds per byte on one NIC lane (0.08 = 100 Gb/s)";
    /// Cost model: NIC lanes per node.
    model_lanes: u32 = 1, "RINGCAST_MODEL_LANES",
        "cost model: NIC lanes per node (1..=8); aggregated sends use all, the binary and dual trees one per child";
    /// Cost model: extra latency of a multicast datagram.
    model_switch_ns: f64 = 200.0, "RINGCAST_MODEL_SWITCH_NS",
        "cost model: extra latency for the switch to replicate a multicast datagram in nanoseconds";
    /// What the engine reports on stderr.
    log_level: u8 = 1, "RINGCAST_LOG_LEVEL",
        "0 silent; 1 engine start/stop, host deaths and refused requests; 2 also every attach, detach and registration";
    /// Name of the engine hosts attach to.
    engine_name: String = "default".to_string(), "RINGCAST_ENGINE",
        "name of the engine daemon hosts attach to (abstract Unix socket @ringcast.<name>)";
    /// Fabric of the broadcasts.
    fabric: FabricKind = FabricKind::None, "RINGCAST_FABRIC",
        "fabric the engine's broadcasts travel on: none (NOP and COPY only), shm (the shared-memory emulation NIC), udp (kernel UDP multicast), dpdk (Ethernet frames through a DPDK port) or verbs (a UD queue pair on an RDMA device)";
    /// Job the engine belongs to.
    job: String = "default".to_string(), "RINGCAST_JOB",
        "job name: the engines of one job share a fabric namespace and derive their world communicator's identity from it";
    /// The job's secret.
    job_secret: JobSecret = JobSecret(None), "RINGCAST_JOB_SECRET",
        "the job's secret, 64 hex digits from the CSPRNG (ringcast run and the MPI interposer draw one): keys the tag of every world-communicator frame; unset, the key is derived from the job name and anyone who knows the name can forge world frames (the engine warns). Never printed";
    /// Engines (nodes) of the job.
    nodes: u32 = 1, "RINGCAST_NODES",
        "engines (nodes) in the job's world communicator";
    /// This engine's node number.
    node: u32 = 0, "RINGCAST_NODE",
        "this engine's rank in the job's world communicator (0..nodes)";
    /// Host processes per node.
    ppn: u32 = 1, "RINGCAST_PPN",
        "host processes per node in the job's world communicator: process rank = node * ppn + local rank; the engine gathers its local processes' posts of each broadcast, takes part once, and copies into every local buffer";
    /// This host process's local rank.
    local_rank: LocalRank = LocalRank::Auto, "RINGCAST_LOCAL_RANK",
        "this host process's local rank on its engine (0..ppn), sent at attach; auto: the lowest free one";
    /// UDP fabric: the members' unicast addresses.
    udp_members: String = String::new(), "RINGCAST_UDP_MEMBERS",
        "udp fabric: every node's unicast address (ip:port, comma-separated, index = node; IPv6 as [addr]:port); the family of the list is the family of the groups";
    /// UDP fabric: the multicast port.
    udp_port: u16 = 0, "RINGCAST_UDP_PORT",
        "udp fabric: port every member's group sockets bind (0: derived from the job name)";
    /// UDP fabric: the multicast interface.
    udp_interface: String = String::new(), "RINGCAST_UDP_INTERFACE",
        "udp fabric: interface for multicast, by name or index (empty: the interface of this node's listed address, or the kernel's route)";
    /// DPDK fabric: the port, as an EAL virtual device.
    dpdk_vdev: String = String::new(), "RINGCAST_DPDK_VDEV",
        "dpdk fabric: the port as an EAL virtual device (--vdev), e.g. net_af_xdp0,iface=eth0,start_queue=0,queue_count=1; empty: the one port dpdk_eal_args make the EAL find (a NIC allowed with -a)";
    /// DPDK fabric: extra EAL arguments.
    dpdk_eal_args: String = String::new(), "RINGCAST_DPDK_EAL_ARGS",
        "dpdk fabric: extra EAL arguments, whitespace-separated, after the fabric's own; an option given here replaces the fabric's (-l, -a, -m, --log-level, --file-prefix, ...)";
    /// DPDK fabric: mbufs in the pool.
    dpdk_mbufs: u32 = 8191, "RINGCAST_DPDK_MBUFS",
        "dpdk fabric: mbufs in the port's pool (4095..=16777215; the queues hold 2 x 1024; 2^n - 1 suits the mempool)";
    /// DPDK fabric: hugepages or not.
    dpdk_hugepages: crate::fabric::dpdk::eal_args::Hugepages = crate::fabric::dpdk::eal_args::Hugepages::Off, "RINGCAST_DPDK_HUGEPAGES",
        "dpdk fabric: off (--no-huge: ordinary memory), on (hugepages; fail without them) or auto (hugepages when hugetlbfs is mounted with enough free pages)";
    /// DPDK fabric: the members' MAC addresses.
    dpdk_members: String = String::new(), "RINGCAST_DPDK_MEMBERS",
        "dpdk fabric: every node's MAC address (comma-separated, index = node); node i's port must have the i-th";
    /// Verbs fabric: the RDMA device.
    verbs_device: String = String::new(), "RINGCAST_VERBS_DEVICE",
        "verbs fabric: RDMA device by name (ibv_devices: mlx5_0, rxe0, ...); empty: the first device";
    /// Verbs fabric: the port.
    verbs_port: u8 = 1, "RINGCAST_VERBS_PORT",
        "verbs fabric: port number on the device (from 1)";
    /// Verbs fabric: the GID index of this member's address.
    verbs_gid_index: u8 = 0, "RINGCAST_VERBS_GID_INDEX",
        "verbs fabric: GID table index of this member's unicast address (RoCE v2: the index of the interface address's RoCE v2 GID, see show_gids; IB: 0); with rdmacm joins it must be the index the kernel uses for verbs_addr, which the first join checks (naming the index to set)";
    /// Verbs fabric: the IP address rdmacm joins groups from.
    verbs_addr: String = String::new(), "RINGCAST_VERBS_ADDR",
        "verbs fabric: IP address of the RDMA device's interface (IPoIB or the RoCE netdev) that rdmacm binds to for multicast joins; its family picks IPv6 ff15:: or IPv4 239/8 groups; empty: the address of the RoCE GID at verbs_gid_index (IB needs it set)";
    /// Verbs fabric: how multicast groups are joined.
    verbs_join: crate::fabric::verbs::group::JoinMode = crate::fabric::verbs::group::JoinMode::Rdmacm, "RINGCAST_VERBS_JOIN",
        "verbs fabric: rdmacm (rdma_join_multicast: SA join on IB, IGMP/MLD on RoCE) or attach (ibv_attach_mcast only; RoCE links that flood multicast)";
    /// Verbs fabric: pre-posted receives.
    verbs_recv_slots: u32 = 1024, "RINGCAST_VERBS_RECV_SLOTS",
        "verbs fabric: receive buffers posted on the UD queue pair (16..=65536): the NIC drops a datagram that finds none posted";
    /// Verbs fabric: send queue depth.
    verbs_send_depth: u32 = 256, "RINGCAST_VERBS_SEND_DEPTH",
        "verbs fabric: send buffers and send queue depth (16..=16384); a completion is requested every depth/4 sends, a send finding all in flight is dropped";
    /// Verbs fabric: HELLO interval.
    verbs_hello_ms: u32 = 10, "RINGCAST_VERBS_HELLO_MS",
        "verbs fabric: first interval between HELLOs (member discovery) while a member's address is unknown, in milliseconds (1..=10000); it doubles after each HELLO up to 1 s (or this, if larger), and starts over when a new member appears";
    /// Verbs fabric: multicast join timeout.
    verbs_join_timeout_ms: u32 = 5000, "RINGCAST_VERBS_JOIN_TIMEOUT_MS",
        "verbs fabric: longest wait for rdmacm to confirm a multicast join, in milliseconds";
}

impl Config {
    /// Checks relationships between values and hard limits of the ABI.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if !self.ring_entries.is_power_of_two() || self.ring_entries < 2 {
            return bad(format!("ring_entries {} is not a power of two >= 2", self.ring_entries));
        }
        if !self.max_ring_entries.is_power_of_two() || self.max_ring_entries > 1 << 20 {
            return bad(format!("max_ring_entries {} is not a power of two <= 2^20", self.max_ring_entries));
        }
        if self.ring_entries > self.max_ring_entries {
            return bad(format!(
                "ring_entries {} > max_ring_entries {}",
                self.ring_entries, self.max_ring_entries
            ));
        }
        if self.max_hosts == 0 || self.max_hosts > 4096 {
            return bad(format!("max_hosts {} outside 1..=4096", self.max_hosts));
        }
        // Region keys carry the slot in 16 bits (see core::regions).
        if self.max_regions == 0 || self.max_regions > u16::MAX as u32 {
            return bad(format!("max_regions {} outside 1..=65535", self.max_regions));
        }
        if self.max_op_bytes == 0 || self.max_region_bytes == 0 || self.max_host_bytes == 0 {
            return bad("max_op_bytes, max_region_bytes and max_host_bytes must be positive".into());
        }
        if self.dma_pass_bytes < 4096 {
            return bad(format!("dma_pass_bytes {} is below 4096", self.dma_pass_bytes));
        }
        if self.mtu < 64 || self.mtu > 65_000 {
            return bad(format!("mtu {} outside 64..=65000", self.mtu));
        }
        let payload = self.mtu
            - (ringcast_abi::wire::WIRE_HEADER_LEN
                + ringcast_abi::wire::WIRE_TRAILER_LEN
                + ringcast_abi::frame::DIGEST_LEN) as u32;
        if self.max_message_bytes.div_ceil(payload) > crate::proto::bitmap::MAX_FRAGS {
            return bad(format!(
                "max_message_bytes {} needs more than {} fragments of {payload} bytes; raise mtu or lower it",
                self.max_message_bytes,
                crate::proto::bitmap::MAX_FRAGS
            ));
        }
        if self.channels == 0 || self.channels > 64 {
            return bad(format!(
                "channels {} outside 1..=64 (a sync window is 64 broadcasts)",
                self.channels
            ));
        }
        if self.max_comms == 0 || self.repair_timeout_us == 0 || self.peer_timeout_ms == 0 {
            return bad("max_comms, repair_timeout_us and peer_timeout_ms must be positive".into());
        }
        for (name, p) in [
            ("fault_drop", self.fault_drop),
            ("fault_corrupt", self.fault_corrupt),
            ("fault_duplicate", self.fault_duplicate),
            ("fault_reorder", self.fault_reorder),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return bad(format!("{name} {p} is not a probability in 0..=1"));
            }
        }
        // The cost model must see finite, non-negative times: a NaN would make every prediction
        // NaN and the choice meaningless (though still deterministic).
        for (name, v) in [
            ("model_latency_ns", self.model_latency_ns),
            ("model_overhead_ns", self.model_overhead_ns),
            ("model_ns_per_byte", self.model_ns_per_byte),
            ("model_switch_ns", self.model_switch_ns),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(format!("{name} {v} is not a finite non-negative number"));
            }
        }
        if !(1..=8).contains(&self.model_lanes) {
            return bad(format!("model_lanes {} outside 1..=8", self.model_lanes));
        }
        if self.attach_timeout_ms == 0 || self.ctl_timeout_ms == 0 {
            return bad("attach_timeout_ms and ctl_timeout_ms must be positive".into());
        }
        // Each pending connection holds a descriptor of the engine's.
        if self.max_pending_conns == 0 || self.max_pending_conns > 65_536 {
            return bad(format!("max_pending_conns {} outside 1..=65536", self.max_pending_conns));
        }
        if self.burst == 0 {
            return bad("burst must be positive".into());
        }
        if self.engine_name.is_empty()
            || self.engine_name.len() > 64
            || self.engine_name.contains(['/', '\0'])
        {
            return bad(format!(
                "engine_name {:?} must be 1..=64 bytes without '/' or NUL",
                self.engine_name
            ));
        }
        if self.nodes == 0 || self.nodes > 4096 || self.node >= self.nodes {
            return bad(format!(
                "node {} of {} nodes: need 0 <= node < nodes <= 4096",
                self.node, self.nodes
            ));
        }
        if self.job.is_empty()
            || self.job.len() > 64
            || !self.job.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return bad(format!("job {:?} must be 1..=64 characters of [A-Za-z0-9_-]", self.job));
        }
        if self.ppn == 0 || self.ppn > self.max_hosts || self.nodes.saturating_mul(self.ppn) > 1 << 24 {
            return bad(format!(
                "ppn {} outside 1..=max_hosts ({}) or nodes * ppn above 2^24",
                self.ppn, self.max_hosts
            ));
        }
        if let LocalRank::Fixed(l) = self.local_rank {
            if l >= self.ppn {
                return bad(format!("local_rank {l} outside 0..ppn ({})", self.ppn));
            }
        }
        if self.fabric == FabricKind::Dpdk {
            let members = crate::fabric::dpdk::frame::parse_members(&self.dpdk_members)
                .map_err(ConfigError::Invalid)?;
            if members.len() != self.nodes as usize {
                return bad(format!(
                    "dpdk_members lists {} addresses for {} nodes",
                    members.len(),
                    self.nodes
                ));
            }
        }
        if !(4095..(1 << 24)).contains(&self.dpdk_mbufs) {
            return bad(format!("dpdk_mbufs {} outside 4095..=16777215", self.dpdk_mbufs));
        }
        if self.verbs_port == 0 {
            return bad("verbs_port must be at least 1".into());
        }
        if !(16..=65536).contains(&self.verbs_recv_slots) {
            return bad(format!("verbs_recv_slots {} outside 16..=65536", self.verbs_recv_slots));
        }
        if !(16..=16384).contains(&self.verbs_send_depth) {
            return bad(format!("verbs_send_depth {} outside 16..=16384", self.verbs_send_depth));
        }
        if !(1..=10_000).contains(&self.verbs_hello_ms) || self.verbs_join_timeout_ms == 0 {
            return bad(format!(
                "verbs_hello_ms {} outside 1..=10000, or verbs_join_timeout_ms is 0",
                self.verbs_hello_ms
            ));
        }
        crate::fabric::verbs::parse_addr(&self.verbs_addr).map_err(ConfigError::Invalid)?;
        if self.fabric == FabricKind::Udp {
            let members = self.udp_member_addrs()?;
            if members.len() != self.nodes as usize {
                return bad(format!(
                    "udp_members lists {} addresses for {} nodes",
                    members.len(),
                    self.nodes
                ));
            }
        }
        Ok(())
    }

    /// The `udp_members` list, parsed (index = node).
    pub fn udp_member_addrs(&self) -> Result<Vec<std::net::SocketAddr>, ConfigError> {
        self.udp_members
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| {
                m.parse().map_err(|e| ConfigError::Invalid(format!("udp_members: {m:?} is not ip:port: {e}")))
            })
            .collect()
    }

    /// The world communicator's size in processes (`nodes * ppn`).
    pub fn world_size(&self) -> u32 {
        self.nodes * self.ppn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented() {
        let c = Config::default();
        c.validate().unwrap();
        let rows = c.describe();
        assert!(rows.len() >= 14);
        for r in &rows {
            assert!(r.env.starts_with("RINGCAST_"), "{}", r.env);
            assert_eq!(r.default, r.current);
            assert!(!r.meaning.is_empty());
        }
    }

    #[test]
    fn docs_list_every_tunable() {
        let doc = include_str!("../../../docs/tunables.md");
        for r in Config::default().describe() {
            let row = format!("| `{}` | `{}` | `{}` |", r.name, r.env, r.default);
            assert!(doc.contains(&row), "docs/tunables.md lacks or misstates {}", r.name);
        }
    }

    #[test]
    fn environment_overrides_and_rejects() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let c = Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "64"), ("RINGCAST_POLL_MODE", "spin")]))
            .unwrap();
        assert_eq!(c.ring_entries, 64);
        assert_eq!(c.poll_mode, PollMode::Spin);
        let row = c.describe().into_iter().find(|r| r.name == "ring_entries").unwrap();
        assert_eq!((row.default.as_str(), row.current.as_str()), ("256", "64"));
        assert!(matches!(
            Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "lots")])),
            Err(ConfigError::Parse { env: "RINGCAST_RING_ENTRIES", .. })
        ));
        assert!(matches!(
            Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "100")])),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            Config::from_lookup(env(&[("RINGCAST_PIN_CPU", "x")])),
            Err(ConfigError::Parse { .. })
        ));
        assert_eq!(Config::from_lookup(env(&[("RINGCAST_PIN_CPU", "1")])).unwrap().pin_cpu, PinCpu::Cpu(1));
    }

    #[test]
    fn verbs_tunables_parse_and_are_checked() {
        let get = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
        assert_eq!(Config::from_lookup(get("RINGCAST_FABRIC", "verbs")).unwrap().fabric, FabricKind::Verbs);
        assert_eq!(FabricKind::Verbs.to_string().parse::<FabricKind>(), Ok(FabricKind::Verbs));
        assert_eq!(
            Config::from_lookup(get("RINGCAST_VERBS_JOIN", "attach")).unwrap().verbs_join,
            crate::fabric::verbs::group::JoinMode::Attach
        );
        assert_eq!(
            Config::from_lookup(get("RINGCAST_VERBS_ADDR", "10.0.0.1")).unwrap().verbs_addr,
            "10.0.0.1"
        );
        for (k, v) in [
            ("RINGCAST_VERBS_PORT", "0"),
            ("RINGCAST_VERBS_RECV_SLOTS", "8"),
            ("RINGCAST_VERBS_RECV_SLOTS", "70000"),
            ("RINGCAST_VERBS_SEND_DEPTH", "15"),
            ("RINGCAST_VERBS_HELLO_MS", "0"),
            ("RINGCAST_VERBS_JOIN_TIMEOUT_MS", "0"),
            ("RINGCAST_VERBS_ADDR", "not-an-ip"),
            ("RINGCAST_VERBS_ADDR", "239.1.2.3"),
            ("RINGCAST_VERBS_ADDR", "::"),
        ] {
            assert!(matches!(Config::from_lookup(get(k, v)), Err(ConfigError::Invalid(_))), "{k}={v}");
        }
        assert!(matches!(
            Config::from_lookup(get("RINGCAST_VERBS_JOIN", "sa")),
            Err(ConfigError::Parse { env: "RINGCAST_VERBS_JOIN", .. })
        ));
        assert!(matches!(
            Config::from_lookup(get("RINGCAST_VERBS_PORT", "256")),
            Err(ConfigError::Parse { env: "RINGCAST_VERBS_PORT", .. })
        ));
    }

    #[test]
    fn algorithm_choice_and_model_parameters() {
        use crate::proto::algo::Algorithm;
        for a in Algorithm::ALL {
            let c: AlgorithmChoice = a.name().parse().unwrap();
            assert_eq!(
                (c, c.to_string(), c.forced()),
                (AlgorithmChoice::Fixed(a), a.name().to_string(), Some(a))
            );
        }
        assert_eq!("auto".parse::<AlgorithmChoice>(), Ok(AlgorithmChoice::Auto));
        assert_eq!(AlgorithmChoice::Auto.to_string(), "auto");
        assert!("fastest".parse::<AlgorithmChoice>().unwrap_err().contains("dual-tree"));
        let get = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
        assert_eq!(
            Config::from_lookup(get("RINGCAST_ALGORITHM", "binomial")).unwrap().algorithm,
            AlgorithmChoice::Fixed(Algorithm::Binomial)
        );
        assert!(matches!(
            Config::from_lookup(get("RINGCAST_ALGORITHM", "Binomial")),
            Err(ConfigError::Parse { env: "RINGCAST_ALGORITHM", .. })
        ));
        assert_eq!(Config::from_lookup(get("RINGCAST_MODEL_LANES", "8")).unwrap().model_lanes, 8);
        for (k, v) in [
            ("RINGCAST_MODEL_LANES", "0"),
            ("RINGCAST_MODEL_LANES", "9"),
            ("RINGCAST_MODEL_LATENCY_NS", "-1"),
            ("RINGCAST_MODEL_OVERHEAD_NS", "NaN"),
            ("RINGCAST_MODEL_NS_PER_BYTE", "inf"),
            ("RINGCAST_MODEL_SWITCH_NS", "-0.5"),
        ] {
            assert!(matches!(Config::from_lookup(get(k, v)), Err(ConfigError::Invalid(_))), "{k}={v}");
        }
        let c = Config::from_lookup(get("RINGCAST_MODEL_NS_PER_BYTE", "0.8")).unwrap();
        assert_eq!(c.model_ns_per_byte, 0.8);
    }
}
