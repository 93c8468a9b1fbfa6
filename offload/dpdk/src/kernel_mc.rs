//! Group MACs on the kernel network device under a DPDK port, for drivers that sit on one
//! (`net_af_xdp` binds a queue of a kernel netdev, named by the vdev's `iface=`).
//!
//! Such a port has no multicast filter of its own in DPDK, and the ways DPDK offers around
//! that — promiscuous or all-multicast mode — are interface flags set with an ioctl: they let
//! every frame of the link into the queue, and nothing undoes them if the engine crashes. The
//! kernel has the right tool instead: a packet-socket membership (`PACKET_ADD_MEMBERSHIP`,
//! `PACKET_MR_MULTICAST`) adds a MAC to the device's multicast list — which a real NIC turns into
//! its hardware filter, and `ip maddr` shows — with a reference count per socket, and the
//! kernel drops every membership of a socket when the socket is closed: at [`Drop`], and when
//! the process dies, however it dies.
//!
//! Contract: one `AF_PACKET` socket of protocol 0 (bound to no packet type: it receives
//! nothing and costs the data path nothing; needs `CAP_NET_RAW`, as AF_XDP does; close-on-exec,
//! so no child keeps the memberships alive) holds this fabric's memberships. [`KernelGroups::set`] makes them exactly the given MACs, adding and
//! dropping the difference; a failure names the call and carries the OS error.
use crate::DpdkError;
use crate::EtherAddr;
use nix::libc;
use std::os::fd::{AsRawFd, OwnedFd};

/// The memberships of one fabric on one kernel device.
#[derive(Debug)]
pub struct KernelGroups {
    sock: OwnedFd,
    ifindex: i32,
    iface: String,
    joined: Vec<EtherAddr>,
}

fn os_error(op: &'static str, e: std::io::Error) -> DpdkError {
    let errno = e.raw_os_error().unwrap_or(0);
    DpdkError::Call { op, errno, msg: e.to_string() }
}

impl KernelGroups {
    /// Memberships on device `iface` (none yet).
    pub fn open(iface: &str) -> Result<KernelGroups, DpdkError> {
        let ifindex = nix::net::if_::if_nametoindex(iface)
            .map_err(|e| os_error("if_nametoindex", std::io::Error::from(e)))?;
        // Close-on-exec: a child the engine spawns must not inherit the socket, or the
        // memberships would outlive the engine.
        let sock = rustix::net::socket_with(
            rustix::net::AddressFamily::PACKET,
            rustix::net::SocketType::RAW,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| os_error("socket(AF_PACKET)", e.into()))?;
        Ok(KernelGroups {
            sock,
            ifindex: i32::try_from(ifindex).unwrap_or(i32::MAX),
            iface: iface.to_string(),
            joined: Vec::new(),
        })
    }

    /// The device's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// MACs held now.
    pub fn joined(&self) -> &[EtherAddr] {
        &self.joined
    }

    /// Makes the memberships exactly `macs`.
    pub fn set(&mut self, macs: &[EtherAddr]) -> Result<(), DpdkError> {
        let stale: Vec<EtherAddr> = self.joined.iter().copied().filter(|m| !macs.contains(m)).collect();
        for mac in stale {
            match self.membership(libc::PACKET_DROP_MEMBERSHIP, mac, "setsockopt(PACKET_DROP_MEMBERSHIP)") {
                // The device was unregistered and registered again meanwhile, which cleared
                // its list: the membership is gone already.
                Err(DpdkError::Call { errno: libc::EADDRNOTAVAIL, .. }) | Ok(()) => {}
                Err(e) => return Err(e),
            }
            self.joined.retain(|m| *m != mac);
        }
        for &mac in macs {
            if !self.joined.contains(&mac) {
                self.membership(libc::PACKET_ADD_MEMBERSHIP, mac, "setsockopt(PACKET_ADD_MEMBERSHIP)")?;
                self.joined.push(mac);
            }
        }
        Ok(())
    }

    fn membership(&self, opt: libc::c_int, mac: EtherAddr, op: &'static str) -> Result<(), DpdkError> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac);
        let mreq = libc::packet_mreq {
            mr_ifindex: self.ifindex,
            mr_type: libc::PACKET_MR_MULTICAST as libc::c_ushort,
            mr_alen: 6,
            mr_address: address,
        };
        // SAFETY: `mreq` is a fully initialised `packet_mreq` that lives across the call, and the
        // length passed is its size; the kernel only reads it. The descriptor is this struct's
        // open socket.
        let r = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_PACKET,
                opt,
                (&mreq as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(os_error(op, std::io::Error::last_os_error()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MACs `ip maddr` lists on `lo` — which takes multicast memberships like any device.
    fn listed(iface: &str) -> Vec<String> {
        std::fs::read_to_string("/proc/net/dev_mcast")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(1) == Some(&iface)).then(|| f.get(4).map(|s| s.to_string())).flatten()
            })
            .collect()
    }

    #[test]
    fn memberships_follow_set_and_go_with_the_socket() {
        let mut k = match KernelGroups::open("lo") {
            Ok(k) => k,
            // Without CAP_NET_RAW no packet socket opens: the error must name the call.
            Err(e) => {
                assert!(e.to_string().contains("socket(AF_PACKET)"), "{e}");
                return;
            }
        };
        let a = [0x33, 0x33, 0x72, 0x63, 0x00, 0x01];
        let b = [0x33, 0x33, 0x72, 0x63, 0x00, 0x02];
        let hex = |m: EtherAddr| m.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let flags = rustix::io::fcntl_getfd(&k.sock).expect("F_GETFD");
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC), "a child must not inherit the memberships");
        k.set(&[a, b]).expect("add two");
        assert!(listed("lo").contains(&hex(a)) && listed("lo").contains(&hex(b)), "{:?}", listed("lo"));
        k.set(&[b]).expect("drop one");
        assert!(!listed("lo").contains(&hex(a)) && listed("lo").contains(&hex(b)), "{:?}", listed("lo"));
        assert_eq!(k.joined(), &[b]);
        drop(k);
        assert!(!listed("lo").contains(&hex(b)), "closing the socket must drop its memberships");
        assert!(KernelGroups::open("no-such-if0").is_err());
    }
}
