//! The systemd notification protocol (`sd_notify(3)`), without libsystemd: one datagram of
//! `KEY=value` lines to the Unix socket `$NOTIFY_SOCKET` names (a path, or `@name` for the
//! abstract namespace). A daemon started by a `Type=notify` unit says `READY=1` once hosts can
//! attach and `STOPPING=1` when it begins to drain; without `NOTIFY_SOCKET` nothing is sent.
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` to the service manager, if one listens; the reason it could not otherwise.
pub fn notify(state: &str) -> std::io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return Ok(false) };
    let target = target.to_string_lossy().into_owned();
    let addr = match target.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())?
        }
        None => SocketAddr::from_pathname(&target)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}
