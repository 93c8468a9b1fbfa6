//! Runner (b): the engine as a separate daemon process (`ringcast-engine`, `ringcast engine`) —
//! the DPU-emulation mode. Host processes attach through `@ringcast.<name>`; SIGINT or SIGTERM
//! stops it cleanly (hosts see their control socket hang up and fail pending waits).
use super::engine_loop::EngineLoop;
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
    let pin = config.runner.pin_cpu;
    let mut engine = EngineLoop::bind(config, 0)?;
    let pinned = pin_current_thread(pin)?;
    engine.set_cpu(pinned.cpu());
    let cfg = engine.config();
    if cfg.runner.log_level >= 1 {
        eprintln!(
            "ringcast-engine[{}]: listening on @ringcast.{} (pid {}, {}, poll {}, cpu {}, rings {}, max hosts {})",
            engine.name(),
            engine.name(),
            std::process::id(),
            // The architecture this binary was built for: a DPU build says aarch64 (the DPU
            // emulation test checks it under qemu-aarch64).
            std::env::consts::ARCH,
            super::idle::Idle::new(cfg).mode(),
            pinned.cpu().map_or("unpinned".to_string(), |c| c.to_string()),
            cfg.limits.ring_entries,
            cfg.limits.max_hosts,
        );
        if let Some(port) = engine.tcp_port() {
            eprintln!(
                "ringcast-engine[{}]: hosts attach over TCP at {} port {port} (job secret required)",
                engine.name(),
                cfg.runner.listen_tcp,
            );
        }
    }
    engine.run(&stop);
    let c = engine.engine().counters();
    if engine.config().runner.log_level >= 1 {
        eprintln!(
            "ringcast-engine[{}]: stopped; {} hosts served ({} lost), {} descriptors ok, {} failed, {} dropped in flight",
            engine.name(),
            c.hosts_attached,
            c.hosts_lost,
            c.completed_ok,
            c.completed_err,
            c.dropped_in_flight
        );
    }
    Ok(())
}
