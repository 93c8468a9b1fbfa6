//! Runner (a): the engine as a pinned polling thread inside the host process (emulation mode).
//!
//! The thread runs the same [`EngineLoop`] as the daemon, listening on a private name
//! (`thread-<pid>-<n>`), so the host library attaches to it exactly as it attaches to a daemon —
//! same rings, same control messages, same code path. Other processes could attach too, which is
//! how one engine serves a whole emulated node.
use super::engine_loop::EngineLoop;
use super::pin::pin_current_thread;
use crate::config::Config;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running engine thread; stops and joins when dropped.
pub struct ThreadEngine {
    name: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pinned: Option<usize>,
}

impl ThreadEngine {
    /// The name hosts attach with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CPU the thread is pinned to, if any.
    pub fn pinned_cpu(&self) -> Option<usize> {
        self.pinned
    }

    /// Stops the loop and waits for the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // Relaxed: see EngineLoop::run.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ThreadEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts an engine thread with `config` (its `engine_name` is replaced by a private name unless
/// `keep_name`). Returns once the engine listens, so a host can attach immediately.
pub fn spawn_thread(mut config: Config, keep_name: bool) -> std::io::Result<ThreadEngine> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    if !keep_name {
        config.runner.engine_name =
            format!("thread-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    }
    let name = config.runner.engine_name.clone();
    let pin = config.runner.pin_cpu;
    // Bind before spawning so that attach cannot race the listener.
    let mut engine = EngineLoop::bind(config, 1)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new().name(format!("ringcast-{name}")).spawn(move || {
        // Held while the engine runs: its claim on the CPU (see `pin`).
        let pinned = pin_current_thread(pin).ok();
        let _ = tx.send(pinned.as_ref().and_then(|p| p.cpu()));
        engine.run(&stop2);
        drop(pinned);
    })?;
    let pinned = rx.recv().ok().flatten();
    Ok(ThreadEngine { name, stop, handle: Some(handle), pinned })
}
