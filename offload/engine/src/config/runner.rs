//! The runners' section: the polling loop (burst, idle behaviour, pinning), the control
//! sockets' timers and TCP listener, the DMA backends served, logging and the engine's name.
use ringcast_proto::config::{invalid, ConfigError};
use std::fmt;
use std::str::FromStr;

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

/// Which DMA backends an engine serves (each host picks one at attach; see `runner::dma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaMode {
    /// Engine: every backend (a host over TCP cannot use `mapped`). Host: `mapped` over the
    /// Unix socket, `cma` over TCP.
    Auto,
    /// Only shared mappings of sealed memfds (same machine).
    Mapped,
    /// Only cross-memory attach: the engine maps nothing of its hosts (the BlueField contract).
    Cma,
    /// Only RDMA READ/WRITE on a reliable-connected queue pair per host (the BlueField
    /// contract on real hardware; the device of the `verbs` section).
    Rdma,
}

impl FromStr for DmaMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DmaMode::Auto),
            "mapped" => Ok(DmaMode::Mapped),
            "cma" => Ok(DmaMode::Cma),
            "rdma" => Ok(DmaMode::Rdma),
            _ => Err(format!("expected auto, mapped, cma or rdma, got {s:?}")),
        }
    }
}

impl fmt::Display for DmaMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DmaMode::Auto => "auto",
            DmaMode::Mapped => "mapped",
            DmaMode::Cma => "cma",
            DmaMode::Rdma => "rdma",
        })
    }
}

/// Which CPU the polling thread is pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinCpu {
    /// Not pinned.
    None,
    /// A CPU of its own: the highest-numbered CPU the process may run on that no other engine
    /// of the machine holds (hosts usually start on low CPUs); unpinned when every one has an
    /// engine already.
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

ringcast_proto::tunables! {
    /// The polling loop and its control sockets (section `runner`).
    pub struct RunnerConfig in "runner" {
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
        /// How long a thread-mode engine thread stays parked after its host's blocking call.
        handback_us: u32 = 100, "RINGCAST_HANDBACK_US",
            "thread mode: microseconds the engine thread stays parked after a host's blocking call returns (a host calling again at once keeps driving; work no host drives waits at most about 1 ms)";
        /// Whether a host pins itself to its engine's CPU.
        host_pin: bool = false, "RINGCAST_HOST_PIN",
            "host library: pin the attaching thread to the CPU the engine is pinned to. Daemon mode (emulation with more pollers than CPUs): host and engine take turns on one CPU by sched_yield instead of waking each other across CPUs. Thread mode: the host, which drives its engine's loop while it waits, stays on the CPU that engine claimed, as an MPI library binds rank i to core i. The binding is the attaching thread's for good (not undone when the host detaches): threads it starts afterwards (an OpenMP team after MPI_Init) inherit that one CPU, and a second engine it spawns finds no CPU of its own to pin to. `ringcast bench` sets it for its ranks when every engine has a CPU, one rank per node";
        /// CPU the polling thread is pinned to.
        pin_cpu: PinCpu = PinCpu::Auto, "RINGCAST_PIN_CPU",
            "CPU the engine's polling thread is pinned to: none, auto (a CPU no other engine holds, highest first; unpinned when every CPU has one) or a number";
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
        /// What the engine reports in its log.
        log_level: u8 = 1, "RINGCAST_LOG_LEVEL",
            "0 silent; 1 engine start/stop, host deaths and refused requests; 2 also every attach, detach and registration";
        /// Where the engine logs.
        log_file: String = String::new(), "RINGCAST_LOG_FILE",
            "engine daemon: append its log to this file (each line with a UTC timestamp and level; reopened on SIGHUP, for logrotate); empty: stderr";
        /// Name of the engine hosts attach to.
        engine_name: String = "default".to_string(), "RINGCAST_ENGINE",
            "engine hosts attach to: a name (abstract Unix socket @ringcast.<name>) or, for a host, tcp://ip:port (an engine across the PCIe boundary)";
        /// TCP address the engine also accepts hosts on.
        listen_tcp: String = String::new(), "RINGCAST_LISTEN_TCP",
            "engine: also accept hosts over TCP at ip:port (port 0: any; the engine logs it); needs RINGCAST_JOB_SECRET, which every TCP host proves with AUTH. Empty: Unix socket only";
        /// DMA backends served (engine) or used (host).
        dma: DmaMode = DmaMode::Auto, "RINGCAST_DMA",
            "how the engine reaches host memory: mapped (shared memfd mappings, one machine), cma (process_vm_readv/writev: nothing mapped, host-owned rings, buffers registered by address), rdma (RDMA READ/WRITE on one RC queue pair per host, on the device of RINGCAST_VERBS_DEVICE/_PORT/_GID_INDEX; host-owned rings and buffers registered with the host's own device) or auto (engine: all three; host: mapped over a Unix socket, cma over TCP)";
    }
}

impl RunnerConfig {
    /// Checks the section's values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.attach_timeout_ms == 0 || self.ctl_timeout_ms == 0 {
            return invalid("attach_timeout_ms and ctl_timeout_ms must be positive".into());
        }
        // Each pending connection holds a descriptor of the engine's.
        if self.max_pending_conns == 0 || self.max_pending_conns > 65_536 {
            return invalid(format!("max_pending_conns {} outside 1..=65536", self.max_pending_conns));
        }
        if self.burst == 0 {
            return invalid("burst must be positive".into());
        }
        if let Some(addr) = self.engine_name.strip_prefix("tcp://") {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return invalid(format!("engine {:?}: expected tcp://ip:port", self.engine_name));
            }
        } else if self.engine_name.is_empty()
            || self.engine_name.len() > 64
            || self.engine_name.contains(['/', '\0'])
        {
            return invalid(format!(
                "engine_name {:?} must be 1..=64 bytes without '/' or NUL",
                self.engine_name
            ));
        }
        if !self.listen_tcp.is_empty() && self.listen_tcp.parse::<std::net::SocketAddr>().is_err() {
            return invalid(format!("listen_tcp {:?}: expected ip:port", self.listen_tcp));
        }
        Ok(())
    }
}
