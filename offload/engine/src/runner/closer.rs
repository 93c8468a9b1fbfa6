//! Closing descriptors a peer chose, off the polling loop.
//!
//! `close(2)` can block for as long as the descriptor's owner likes: a TCP socket with unsent
//! data and `SO_LINGER`, a FUSE file whose daemon delays FLUSH. A host can pass any descriptor
//! over the control socket, so every received descriptor the engine does not keep is closed by
//! this thread, never by the loop.
use std::os::fd::OwnedFd;
use std::sync::mpsc::{channel, Sender};

/// Hands descriptors to the closer thread.
pub struct Closer {
    tx: Option<Sender<OwnedFd>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Closer {
    /// Starts the closer thread.
    pub fn spawn() -> std::io::Result<Self> {
        let (tx, rx) = channel::<OwnedFd>();
        let thread = std::thread::Builder::new().name("ringcast-closer".into()).spawn(move || {
            // Each descriptor is dropped (closed) here, however long that takes.
            for fd in rx {
                drop(fd);
            }
        })?;
        Ok(Closer { tx: Some(tx), thread: Some(thread) })
    }

    /// Closes `fd` on the closer thread.
    pub fn dispose(&self, fd: OwnedFd) {
        if let Some(tx) = &self.tx {
            // A send fails only if the thread is gone, and then the fd is closed right here.
            let _ = tx.send(fd);
        }
    }

    /// Closes every descriptor in `fds`.
    pub fn dispose_all(&self, fds: &mut Vec<OwnedFd>) {
        for fd in fds.drain(..) {
            self.dispose(fd);
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        // Closing the channel ends the thread. It is detached, not joined: a descriptor that
        // blocks forever must not hang engine shutdown either.
        self.tx.take();
        self.thread.take();
    }
}
