//! One DPDK ethdev port with one receive and one transmit queue, its mbuf pool, and mbuf
//! ownership — the `dpdk` fabric's only contact with packet memory.
//!
//! Ownership, explicitly:
//! * [`Pool`] owns an `rte_mempool` and an `Arc<Eal>`; it is freed (`rte_mempool_free`) when
//!   dropped, which [`Port`] arranges to happen only after the port is closed (the driver's
//!   rings hold mbufs of the pool until then).
//! * [`Mbuf`] owns one mbuf: dropping it frees it. [`Mbuf::into_raw`] hands it to the driver
//!   (`rte_eth_tx_burst` takes ownership of what it accepts); what the driver does not accept
//!   comes back and is freed. Received mbufs are wrapped in [`Mbuf`] at once, so each is freed
//!   exactly once, after the caller's closure has looked at its bytes.
//! * [`Port`] owns the port (claimed in the [`Eal`]), the pool, and the mbufs queued for
//!   transmission. Dropping it sends what is queued, frees what the driver refuses, turns off
//!   the receive modes it turned on, flushes its multicast filter, stops and closes the port,
//!   then frees the pool and releases its EAL handle — in that order, whatever happened before.
//! * Nothing panics; failures of set-up calls are [`DpdkError`]s naming the call, failures on
//!   the data path are counted.
//!
//! `Send`: a `Port` is used by one thread at a time (`&mut self` for every data-path call); DPDK
//! allows any thread to use a queue that no other thread uses concurrently, and the pool's
//! default operations are multi-producer/multi-consumer safe (a thread that is not an EAL lcore
//! bypasses the per-lcore cache).
use crate::eal::Eal;
use crate::ffi::ToResult;
use crate::DpdkError;
use crate::EtherAddr;
use dpdk_sys::{rte_eth_conf, rte_eth_dev_info, rte_eth_stats, rte_ether_addr, rte_mbuf, rte_mempool};
use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::Arc;

/// Mbufs taken from the receive queue per `rte_eth_rx_burst` (and the most handed to one call
/// of the receive closure per burst).
pub const RX_BURST: usize = 32;
/// Frames queued for one `rte_eth_tx_burst` (a full batch is sent at once).
pub const TX_BURST: usize = 32;
// Burst sizes are passed to DPDK as `u16`.
const _: () = assert!(RX_BURST <= u16::MAX as usize && TX_BURST <= u16::MAX as usize);

/// Per-lcore cache of the pool (used only on EAL lcores, e.g. the daemon's main thread).
const POOL_CACHE: u32 = 128;

/// An mbuf pool.
pub struct Pool {
    raw: NonNull<rte_mempool>,
    size: u32,
    // Dropped after the pool is freed (field order).
    _eal: Arc<Eal>,
}

impl Pool {
    /// `n` mbufs of `data_room` bytes (headroom included) on `socket`, named `name`.
    fn new(eal: Arc<Eal>, name: &str, n: u32, data_room: u16, socket: i32) -> Result<Pool, DpdkError> {
        let cname = CString::new(name).map_err(|_| DpdkError::Invalid(format!("pool name {name:?}")))?;
        let cache = POOL_CACHE.min(n / 4);
        // SAFETY: the EAL is initialised (`eal` is live); the name is a valid C string copied by
        // DPDK. A NULL result is an error with its reason in rte_errno.
        let raw =
            unsafe { dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket) }
                .to_result("rte_pktmbuf_pool_create")?;
        Ok(Pool { raw, size: n, _eal: eal })
    }

    /// Mbufs in the pool now (not held by the driver or by this code), per-lcore caches included.
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is live (owned by self).
        unsafe { dpdk_sys::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs the pool was created with.
    pub fn size(&self) -> u32 {
        self.size
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: every mbuf of this pool was returned: the port that used it is closed (Port's
        // Drop runs before its `pool` field is dropped) and no `Mbuf` outlives its port.
        unsafe { dpdk_sys::rte_mempool_free(self.raw.as_ptr()) }
    }
}

/// One owned mbuf, freed on drop.
pub struct Mbuf(NonNull<rte_mbuf>);

impl Mbuf {
    /// An empty mbuf from `pool`, if one is free.
    fn alloc(pool: &Pool) -> Option<Mbuf> {
        // SAFETY: the pool is live; a NULL result means it is empty.
        NonNull::new(unsafe { dpdk_sys::rc_rte_pktmbuf_alloc(pool.raw.as_ptr()) }).map(Mbuf)
    }

    /// Takes ownership of an mbuf the driver handed over.
    ///
    /// # Safety
    /// `raw` is a valid mbuf that nothing else owns or frees.
    unsafe fn from_raw(raw: NonNull<rte_mbuf>) -> Mbuf {
        Mbuf(raw)
    }

    /// Gives up ownership (to the driver).
    fn into_raw(self) -> *mut rte_mbuf {
        let raw = self.0.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// Extends the data by `len` bytes and returns them; `None` (nothing changed) when the
    /// tailroom is shorter.
    fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: the mbuf is valid and owned; append returns NULL or a pointer to `len` bytes
        // of its data room that belong to this mbuf.
        let p = unsafe { dpdk_sys::rc_rte_pktmbuf_append(self.0.as_ptr(), len) };
        let p = NonNull::new(p.cast::<u8>())?;
        // SAFETY: `len` bytes at `p` are inside this mbuf's buffer, which `&mut self` borrows
        // exclusively for the slice's lifetime.
        Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), usize::from(len)) })
    }

    /// The received bytes, if they sit in one segment (a chained mbuf is refused: `None`).
    fn data(&self) -> Option<&[u8]> {
        let m = self.0.as_ptr();
        // SAFETY: the mbuf is valid and owned; mtod and the lengths read its header. The first
        // segment's `data_len` bytes at `mtod` are initialised packet data in its buffer, which
        // lives as long as `&self`.
        unsafe {
            let seg = dpdk_sys::rc_rte_pktmbuf_data_len(m);
            if u32::from(seg) != dpdk_sys::rc_rte_pktmbuf_pkt_len(m) {
                return None;
            }
            let p = dpdk_sys::rc_rte_pktmbuf_mtod(m).cast::<u8>();
            if p.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(p, usize::from(seg)))
        }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: owned, valid, freed exactly once (into_raw forgets self).
        unsafe { dpdk_sys::rc_rte_pktmbuf_free(self.0.as_ptr()) }
    }
}

/// How the port is set up.
#[derive(Clone, Debug)]
pub struct PortSpec {
    /// Port by name (the vdev's name); empty: the only port the EAL found.
    pub name: String,
    /// Mbufs in the pool.
    pub mbufs: u32,
    /// Mbuf data room, headroom included.
    pub data_room: u16,
    /// Receive and transmit descriptors.
    pub descriptors: u16,
    /// MTU to configure when above Ethernet's 1500 (else the port's default).
    pub mtu: u32,
}

/// The port's own statistics (`rte_eth_stats_get`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames sent.
    pub opackets: u64,
    /// Frames the device dropped for lack of room in the receive queue.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// Receive buffer allocation failures.
    pub rx_nombuf: u64,
}

/// What a transmit attempt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queued {
    /// In the batch (sent with it).
    Yes,
    /// The pool had no free mbuf: dropped.
    NoMbuf,
    /// The frame does not fit an mbuf: dropped.
    TooLong,
}

/// A started port; see the module doc.
pub struct Port {
    id: u16,
    mac: EtherAddr,
    mtu: u16,
    driver: String,
    /// Mbufs waiting for `rte_eth_tx_burst`, owned by the port (first `tx_len` entries).
    tx: [*mut rte_mbuf; TX_BURST],
    tx_len: usize,
    rx: [*mut rte_mbuf; RX_BURST],
    /// Modes this port turned on (and turns off on drop).
    promiscuous_on: bool,
    allmulticast_on: bool,
    mc_list_set: bool,
    /// Frames the driver did not accept (freed).
    tx_refused: u64,
    /// Frames handed to the driver.
    tx_accepted: u64,
    // Dropped after `Drop::drop` has closed the port: the pool, then the EAL handle.
    pool: Pool,
    eal: Arc<Eal>,
}

// SAFETY: see the module doc: the raw pointers are mbufs and a pool this port owns exclusively;
// every data-path call takes `&mut self`, so one thread at a time uses the queues, which DPDK
// permits from any thread.
unsafe impl Send for Port {}

/// Resolves the port: by name, or the only one there is.
fn find_port(name: &str) -> Result<u16, DpdkError> {
    if name.is_empty() {
        // SAFETY: the EAL is initialised (the caller holds it); reads ethdev's port table.
        let n = unsafe { dpdk_sys::rte_eth_dev_count_avail() };
        return match n {
            1 => Ok(0),
            0 => Err(DpdkError::Invalid(
                "the EAL found no port (set dpdk_vdev, or allow a device in dpdk_eal_args)".into(),
            )),
            n => Err(DpdkError::Invalid(format!("the EAL found {n} ports; name one with dpdk_vdev"))),
        };
    }
    let cname = CString::new(name).map_err(|_| DpdkError::Invalid(format!("port name {name:?}")))?;
    let mut id = 0u16;
    // SAFETY: valid C string and out-pointer for the call's duration.
    unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) }
        .to_result("rte_eth_dev_get_port_by_name")
        .map_err(|e| {
            DpdkError::Invalid(format!("no port named {name:?} ({e}): is its driver plugin installed?"))
        })?;
    Ok(id)
}

impl Port {
    /// Opens, configures and starts the port `spec` names; see the module doc.
    pub fn open(eal: Arc<Eal>, spec: &PortSpec) -> Result<Port, DpdkError> {
        let id = find_port(&spec.name)?;
        eal.claim_port(id)?;
        let opened = Self::open_claimed(eal.clone(), id, spec);
        if opened.is_err() {
            eal.release_port(id);
        }
        opened
    }

    fn open_claimed(eal: Arc<Eal>, id: u16, spec: &PortSpec) -> Result<Port, DpdkError> {
        let mut info = rte_eth_dev_info::default();
        // SAFETY: the port exists; `info` is a valid out-pointer.
        unsafe { dpdk_sys::rte_eth_dev_info_get(id, &mut info) }.to_result("rte_eth_dev_info_get")?;
        let driver = if info.driver_name.is_null() {
            String::from("?")
        } else {
            // SAFETY: the driver's name is a static NUL-terminated string.
            unsafe { CStr::from_ptr(info.driver_name) }.to_string_lossy().into_owned()
        };
        if info.max_rx_queues == 0 || info.max_tx_queues == 0 {
            return Err(DpdkError::Invalid(format!("port {id} ({driver}) has no receive or transmit queue")));
        }
        // SAFETY: reads the port's NUMA socket (or SOCKET_ID_ANY).
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
        let pool = Pool::new(eal.clone(), &format!("rc-pool-{id}"), spec.mbufs, spec.data_room, socket)?;
        let clamp = |n: u16, lim: dpdk_sys::rte_eth_desc_lim| {
            let n = if lim.nb_max > 0 { n.min(lim.nb_max) } else { n };
            n.max(lim.nb_min)
        };
        let nb_rx = clamp(spec.descriptors, info.rx_desc_lim);
        let nb_tx = clamp(spec.descriptors, info.tx_desc_lim);

        // From here on the port must be closed on failure: build the `Port` first, so that its
        // Drop does it (it tolerates a port that was never started).
        let mut port = Port {
            id,
            mac: [0; 6],
            mtu: 0,
            driver,
            tx: [std::ptr::null_mut(); TX_BURST],
            tx_len: 0,
            rx: [std::ptr::null_mut(); RX_BURST],
            promiscuous_on: false,
            allmulticast_on: false,
            mc_list_set: false,
            tx_refused: 0,
            tx_accepted: 0,
            pool,
            eal,
        };
        let mut conf = rte_eth_conf::default();
        if spec.mtu > 1500 {
            conf.rxmode.mtu = spec.mtu;
        }
        // SAFETY: (each call) the port exists and is stopped; pointers are valid for the call;
        // the pool outlives the queues (dropped after the port is closed).
        unsafe {
            dpdk_sys::rte_eth_dev_configure(id, 1, 1, &conf).to_result("rte_eth_dev_configure")?;
            let socket = u32::try_from(socket).unwrap_or(0);
            dpdk_sys::rte_eth_rx_queue_setup(id, 0, nb_rx, socket, std::ptr::null(), port.pool.raw.as_ptr())
                .to_result("rte_eth_rx_queue_setup")?;
            dpdk_sys::rte_eth_tx_queue_setup(id, 0, nb_tx, socket, std::ptr::null())
                .to_result("rte_eth_tx_queue_setup")?;
            dpdk_sys::rte_eth_dev_start(id).to_result("rte_eth_dev_start")?;
            let mut mac = rte_ether_addr::default();
            dpdk_sys::rte_eth_macaddr_get(id, &mut mac).to_result("rte_eth_macaddr_get")?;
            port.mac = mac.addr_bytes;
            dpdk_sys::rte_eth_dev_get_mtu(id, &mut port.mtu).to_result("rte_eth_dev_get_mtu")?;
        }
        Ok(port)
    }

    /// The port's MAC address.
    pub fn mac(&self) -> EtherAddr {
        self.mac
    }

    /// The port's MTU (bytes after the Ethernet header).
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// The driver's name (`net_af_xdp`, `net_memif`, `mlx5_pci`, ...).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The EAL this port lives in.
    pub fn eal(&self) -> &Eal {
        &self.eal
    }

    /// Mbufs free in the pool, and its size (a leak check: with nothing queued or in flight,
    /// free + what the driver's queues hold = size).
    pub fn pool_usage(&self) -> (u32, u32) {
        (self.pool.available(), self.pool.size())
    }

    /// Frames queued for the next burst.
    pub fn queued(&self) -> usize {
        self.tx_len
    }

    /// Frames handed to the driver, and frames it refused (freed), so far.
    pub fn tx_counts(&self) -> (u64, u64) {
        (self.tx_accepted, self.tx_refused)
    }

    /// Queues a frame of `len` bytes that `fill` writes; sends the batch when it is full.
    pub fn queue_tx(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Queued {
        let Ok(len16) = u16::try_from(len) else { return Queued::TooLong };
        let Some(mut m) = Mbuf::alloc(&self.pool) else { return Queued::NoMbuf };
        match m.append(len16) {
            Some(buf) => fill(buf),
            None => return Queued::TooLong, // `m` is freed here
        }
        if self.tx_len == TX_BURST {
            self.flush();
        }
        match self.tx.get_mut(self.tx_len) {
            Some(slot) => {
                *slot = m.into_raw();
                self.tx_len += 1;
            }
            // Unreachable (the batch was just emptied); the mbuf is freed, never leaked.
            None => return Queued::NoMbuf,
        }
        if self.tx_len == TX_BURST {
            self.flush();
        }
        Queued::Yes
    }

    /// Sends the queued frames (one `rte_eth_tx_burst`); what the driver does not take is freed
    /// and counted. Returns (sent, refused).
    pub fn flush(&mut self) -> (usize, usize) {
        let n = self.tx_len;
        if n == 0 {
            return (0, 0);
        }
        self.tx_len = 0;
        // `n <= TX_BURST`, which fits u16 (asserted at compile time), as does `want` below.
        // SAFETY: the first `n` entries are owned, valid mbufs; the driver takes ownership of
        // the first `sent` of them, the rest stay ours.
        let sent =
            usize::from(unsafe { dpdk_sys::rc_rte_eth_tx_burst(self.id, 0, self.tx.as_mut_ptr(), n as u16) })
                .min(n);
        for &raw in &self.tx[sent..n] {
            if let Some(raw) = NonNull::new(raw) {
                // SAFETY: not accepted by the driver: still owned here, freed once.
                drop(unsafe { Mbuf::from_raw(raw) });
            }
        }
        self.tx_accepted += sent as u64;
        self.tx_refused += (n - sent) as u64;
        (sent, n - sent)
    }

    /// Takes up to `max` (≤ [`RX_BURST`]) received frames, hands each one's bytes to `f` (a
    /// chained mbuf as `None`), and frees them. Returns how many were taken.
    pub fn receive(&mut self, max: usize, f: &mut dyn FnMut(Option<&[u8]>)) -> usize {
        let want = max.min(RX_BURST);
        if want == 0 {
            return 0;
        }
        // SAFETY: `rx` has room for `want` pointers; the driver fills the first `got` with mbufs
        // whose ownership passes to us, each wrapped at once below.
        let got = usize::from(unsafe {
            dpdk_sys::rc_rte_eth_rx_burst(self.id, 0, self.rx.as_mut_ptr(), want as u16)
        })
        .min(want);
        for &raw in &self.rx[..got] {
            let Some(raw) = NonNull::new(raw) else { continue };
            // SAFETY: handed over by rx_burst just now; owned by nothing else.
            let m = unsafe { Mbuf::from_raw(raw) };
            f(m.data());
            // `m` is freed here, after `f` looked at its bytes.
        }
        got
    }

    /// Sets the multicast filter to `groups` (may fail with ENOTSUP: the driver keeps none).
    pub fn set_mc_list(&mut self, groups: &[EtherAddr]) -> Result<(), DpdkError> {
        let mut list: Vec<rte_ether_addr> =
            groups.iter().map(|&m| rte_ether_addr { addr_bytes: m }).collect();
        let n = u32::try_from(list.len()).map_err(|_| DpdkError::Invalid("too many groups".into()))?;
        let ptr = if list.is_empty() { std::ptr::null_mut() } else { list.as_mut_ptr() };
        // SAFETY: `ptr` points to `n` addresses (or is NULL with n = 0, which flushes the list).
        unsafe { dpdk_sys::rte_eth_dev_set_mc_addr_list(self.id, ptr, n) }
            .to_result("rte_eth_dev_set_mc_addr_list")?;
        self.mc_list_set = n > 0;
        Ok(())
    }

    /// One of ethdev's per-port mode calls (`rte_eth_{promiscuous,allmulticast}_{get,enable,disable}`).
    fn mode_call(&self, f: unsafe extern "C" fn(u16) -> i32) -> i32 {
        // SAFETY: every function passed takes only a port id, and this one names a configured
        // port that stays open while `self` lives.
        unsafe { f(self.id) }
    }

    /// Turns all-multicast reception on or off (off only if this port turned it on).
    pub fn set_allmulticast(&mut self, on: bool) -> Result<(), DpdkError> {
        use dpdk_sys::{rte_eth_allmulticast_disable, rte_eth_allmulticast_enable, rte_eth_allmulticast_get};
        if on {
            if self.mode_call(rte_eth_allmulticast_get) == 1 {
                return Ok(()); // already on: not ours to turn off
            }
            self.mode_call(rte_eth_allmulticast_enable).to_result("rte_eth_allmulticast_enable")?;
            self.allmulticast_on = true;
        } else if self.allmulticast_on {
            self.mode_call(rte_eth_allmulticast_disable).to_result("rte_eth_allmulticast_disable")?;
            self.allmulticast_on = false;
        }
        Ok(())
    }

    /// Turns promiscuous reception on or off (off only if this port turned it on).
    pub fn set_promiscuous(&mut self, on: bool) -> Result<(), DpdkError> {
        use dpdk_sys::{rte_eth_promiscuous_disable, rte_eth_promiscuous_enable, rte_eth_promiscuous_get};
        if on {
            if self.mode_call(rte_eth_promiscuous_get) == 1 {
                return Ok(());
            }
            self.mode_call(rte_eth_promiscuous_enable).to_result("rte_eth_promiscuous_enable")?;
            self.promiscuous_on = true;
        } else if self.promiscuous_on {
            self.mode_call(rte_eth_promiscuous_disable).to_result("rte_eth_promiscuous_disable")?;
            self.promiscuous_on = false;
        }
        Ok(())
    }

    /// Whether promiscuous / all-multicast reception is on (whoever turned it on).
    pub fn modes(&self) -> (bool, bool) {
        (
            self.mode_call(dpdk_sys::rte_eth_promiscuous_get) == 1,
            self.mode_call(dpdk_sys::rte_eth_allmulticast_get) == 1,
        )
    }

    /// The port's statistics, if the driver reports them.
    pub fn stats(&self) -> Option<PortStats> {
        let mut s = rte_eth_stats::default();
        // SAFETY: valid out-pointer; the port exists.
        unsafe { dpdk_sys::rte_eth_stats_get(self.id, &mut s) }.to_result("rte_eth_stats_get").ok()?;
        Some(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // Queued frames go out (the last sync message may be among them); refused ones are freed.
        self.flush();
        // Best effort, never panicking: a driver that cannot undo a mode leaves it (the port
        // is closed next anyway).
        if self.mc_list_set {
            let _ = self.set_mc_list(&[]);
        }
        let _ = self.set_allmulticast(false);
        let _ = self.set_promiscuous(false);
        // SAFETY: the port was configured by this Port (possibly not started: stop is then a
        // no-op returning an error, ignored); no mbuf of ours is queued any more; closing
        // releases the driver's mbufs back to the pool, which is freed after this (field drop
        // order: `pool`, then `eal`).
        unsafe {
            let _ = dpdk_sys::rte_eth_dev_stop(self.id);
            let _ = dpdk_sys::rte_eth_dev_close(self.id);
        }
        self.eal.release_port(self.id);
    }
}
