//! Runner (b): the engine as a separate daemon process (`ringcast-engine`, `ringcast engine`) —
//! the DPU-emulation mode, and the service a DPU runs (`packaging/systemd/`). Host processes
//! attach through `@ringcast.<name>` (or TCP). As a service:
//!
//! * **Readiness**: once it listens (hosts can attach), it tells the service manager
//!   `READY=1` by the `sd_notify` protocol when `NOTIFY_SOCKET` is set (a `Type=notify` unit).
//! * **Stop**: SIGTERM or SIGINT drains — `STOPPING=1`; no new descriptor is taken once the
//!   attached hosts are gone, what they queued is finished or answered with `EngineShutdown`,
//!   and the protocol's obligations to the other engines are settled (at most a peer timeout
//!   of silence) — then it exits 0.
//! * **Log**: stderr, or `RINGCAST_LOG_FILE` (appended, each line stamped and levelled),
//!   reopened on SIGHUP for logrotate ([`super::log`]).
use super::engine_loop::EngineLoop;
use super::notify::notify;
use super::pin::pin_current_thread;
use crate::config::Config;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Runs the daemon in the calling thread until SIGINT/SIGTERM.
pub fn run_daemon(config: Config) -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    super::log::handle_sighup()?;
    if !config.runner.log_file.is_empty() {
        super::log::to_file(&config.runner.log_file)?;
    }
    let pin = config.runner.pin_cpu;
    let mut engine = EngineLoop::bind(config, 0)?;
    let pinned = pin_current_thread(pin)?;
    engine.set_cpu(pinned.cpu());
    let cfg = engine.config().clone();
    let cfg = &cfg;
    let name = engine.name().to_string();
    let log = |level: u8, msg: std::fmt::Arguments<'_>| {
        if cfg.runner.log_level >= level {
            super::log::line(&name, level, msg);
        }
    };
    log(
        1,
        format_args!(
            "listening on @ringcast.{name} (pid {}, {}, poll {}, cpu {}, rings {}, max hosts {})",
            std::process::id(),
            // The architecture this binary was built for: a DPU build says aarch64 (the DPU
            // emulation test checks it under qemu-aarch64).
            std::env::consts::ARCH,
            super::idle::Idle::new(cfg).mode(),
            pinned.cpu().map_or("unpinned".to_string(), |c| c.to_string()),
            cfg.limits.ring_entries,
            cfg.limits.max_hosts,
        ),
    );
    if let Some(port) = engine.tcp_port() {
        log(
            1,
            format_args!(
                "hosts attach over TCP at {} port {port} (job secret required)",
                cfg.runner.listen_tcp
            ),
        );
    }
    let status = format!("READY=1\nMAINPID={}\nSTATUS=listening on @ringcast.{name}\n", std::process::id());
    if let Err(e) = notify(&status) {
        log(1, format_args!("could not notify the service manager: {e}"));
    }
    engine.run_until_stopped(&stop, || {
        let _ = notify("STOPPING=1\nSTATUS=draining\n");
        log(1, format_args!("stopping: draining what the hosts queued and settling with the other engines"));
    });
    let c = engine.engine().counters();
    log(
        1,
        format_args!(
            "stopped; {} hosts served ({} lost), {} descriptors ok, {} failed, {} dropped in flight",
            c.hosts_attached, c.hosts_lost, c.completed_ok, c.completed_err, c.dropped_in_flight
        ),
    );
    Ok(())
}
