//! Self-test workloads a host runs against an engine: byte-verified COPYs, every bad-descriptor
//! case, NOP round-trip latency and COPY bandwidth. Used by `ringcast demo`, by the tests, and
//! by anyone bringing up an engine on new hardware (like `ibv_rc_pingpong` for verbs).
//!
//! Every check returns an error naming what differed instead of panicking, so a caller decides
//! whether a failure is fatal.
use crate::{Access, Error, Host, RegionKey, SharedBuf, StatusKind, SubmissionDescriptor};
use ringcast_abi::Opcode;
use std::time::Instant;

/// What [`copy_and_errors`] did.
#[derive(Clone, Debug, Default)]
pub struct CopyReport {
    /// Single COPYs verified byte for byte.
    pub copies: usize,
    /// Bytes they moved.
    pub bytes: u64,
    /// COPYs that were in flight together.
    pub batch: usize,
    /// Each bad-descriptor case and the status it got (all as expected, else an error).
    pub bad_cases: Vec<(&'static str, StatusKind)>,
}

/// Small deterministic PRNG (xorshift64*): a seed replays a run exactly.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `len` pseudo-random bytes from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

type Check<T> = Result<T, String>;

fn err(e: Error) -> String {
    e.to_string()
}

/// Random COPYs (each destination byte checked against a model after every copy), a batch of
/// COPYs in flight together reaped by cookie, then every bad-descriptor case, which must get its
/// own typed status and move no byte.
pub fn copy_and_errors(host: &mut Host, seed: u64, copies: usize) -> Check<CopyReport> {
    const LEN: usize = 1 << 20;
    let src = SharedBuf::new(LEN).map_err(err)?;
    let dst = SharedBuf::new(LEN).map_err(err)?;
    let data = pattern(seed, LEN);
    src.write_at(0, &data).map_err(err)?;
    let rs = host.register(&src, Access::READ).map_err(err)?;
    let rd = host.register(&dst, Access::READ_WRITE).map_err(err)?;
    let mut model = vec![0u8; LEN];
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut report = CopyReport::default();

    for i in 0..copies {
        let len = 1 + rng.below(64 * 1024) as usize;
        let so = rng.below((LEN - len) as u64 + 1) as usize;
        let d_o = rng.below((LEN - len) as u64 + 1) as usize;
        let c = host.copy(rd.at(d_o as u64), rs.at(so as u64), len as u64).map_err(err)?;
        if c.bytes != len as u64 {
            return Err(format!("copy {i}: completion reports {} bytes, posted {len}", c.bytes));
        }
        model[d_o..d_o + len].copy_from_slice(&data[so..so + len]);
        if dst.to_vec(d_o as u64, len).map_err(err)? != model[d_o..d_o + len] {
            return Err(format!("copy {i} (seed {seed}): {len} bytes {so}->{d_o} delivered wrong bytes"));
        }
        report.copies += 1;
        report.bytes += len as u64;
    }
    if dst.to_vec(0, LEN).map_err(err)? != model {
        return Err(format!("seed {seed}: bytes outside the copied ranges changed"));
    }

    let n = host.ring_entries().min(64);
    let mut cookies = Vec::with_capacity(n);
    for i in 0..n {
        let cookie = host.next_cookie();
        let off = (i * 4096) as u64;
        host.post(&SubmissionDescriptor::copy(cookie, rd.at(off), rs.at(off + 8192), 4096)).map_err(err)?;
        cookies.push(cookie);
    }
    let mut seen = Vec::with_capacity(n);
    while seen.len() < n {
        let c = host.wait().map_err(err)?;
        if !c.status.is_ok() {
            return Err(format!("batched copy {:#x} failed: {:?}", c.cookie, c.status));
        }
        seen.push(c.cookie);
    }
    seen.sort_unstable();
    if seen != cookies {
        return Err("batched copies did not complete exactly once each".into());
    }
    for i in 0..n {
        let off = i * 4096;
        model[off..off + 4096].copy_from_slice(&data[off + 8192..off + 8192 + 4096]);
    }
    if dst.to_vec(0, LEN).map_err(err)? != model {
        return Err("batched copies delivered wrong bytes".into());
    }
    report.batch = n;

    let ok = SubmissionDescriptor::copy(0, rd.at(0), rs.at(0), 16);
    let (rs_key, rd_key) = (rs.key(), rd.key());
    type Case = (&'static str, fn(&mut SubmissionDescriptor, RegionKey), StatusKind);
    let cases: [Case; 9] = [
        ("unknown opcode", |d, _| d.opcode = Opcode(0x7f), StatusKind::UnknownOpcode),
        ("zero length", |d, _| d.len = 0, StatusKind::BadLength),
        ("oversized length", |d, _| d.len = (1 << 30) + 1, StatusKind::BadLength),
        ("range past region end", |d, _| d.offset = LEN as u64 - 8, StatusKind::OutOfBounds),
        ("offset overflow", |d, _| d.aux_offset = u64::MAX - 4, StatusKind::OutOfBounds),
        ("unregistered key", |d, _| d.key = RegionKey(0x00ff_00ff), StatusKind::UnknownRegion),
        ("reserved flag set", |d, _| d.flags = 1, StatusKind::BadFlags),
        ("communicator on COPY", |d, _| d.comm = 1, StatusKind::BadDescriptor),
        ("write to read-only region", |d, k| d.key = k, StatusKind::AccessDenied),
    ];
    for (what, alter, want) in cases {
        report.bad_cases.push((what, expect(host, ok, |d| alter(d, rs_key), want)?));
    }
    host.deregister(rd).map_err(err)?;
    report
        .bad_cases
        .push(("deregistered key", expect(host, ok, |d| d.key = rd_key, StatusKind::UnknownRegion)?));
    if dst.to_vec(0, LEN).map_err(err)? != model {
        return Err("a refused descriptor moved bytes".into());
    }
    host.deregister(rs).map_err(err)?;
    host.nop().map_err(err)?;
    Ok(report)
}

fn expect(
    host: &mut Host,
    base: SubmissionDescriptor,
    f: impl Fn(&mut SubmissionDescriptor),
    want: StatusKind,
) -> Check<StatusKind> {
    let mut d = base;
    d.cookie = host.next_cookie();
    f(&mut d);
    match host.execute(&d) {
        Err(e) if e.status() == Some(want) => Ok(want),
        Err(e) => Err(format!("{d:?}: expected {want:?}, got {e}")),
        Ok(c) => Err(format!("{d:?}: completed ok ({c:?}), expected {want:?}")),
    }
}

/// Round-trip latencies of `n` NOPs (post, engine, completion), sorted, in nanoseconds.
pub fn nop_round_trips(host: &mut Host, n: usize) -> Check<Vec<u64>> {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let cookie = host.next_cookie();
        let t = Instant::now();
        host.try_post(&SubmissionDescriptor::nop(cookie)).map_err(err)?;
        let c = host.wait().map_err(err)?;
        lat.push(t.elapsed().as_nanos() as u64);
        if c.cookie != cookie || !c.status.is_ok() {
            return Err(format!("NOP {cookie:#x} came back as {c:?}"));
        }
    }
    lat.sort_unstable();
    Ok(lat)
}

/// Value at quantile `q` (0..=1) of sorted `v`.
pub fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Engine COPY bandwidth in bytes per second for `size`-byte copies, keeping the ring full, with
/// the last copy's bytes verified.
pub fn copy_bandwidth(host: &mut Host, size: usize, total: usize) -> Check<f64> {
    let src = SharedBuf::new(size).map_err(err)?;
    let dst = SharedBuf::new(size).map_err(err)?;
    let data = pattern(size as u64, size);
    src.write_at(0, &data).map_err(err)?;
    let rs = host.register(&src, Access::READ).map_err(err)?;
    let rd = match host.register(&dst, Access::READ_WRITE) {
        Ok(r) => r,
        Err(e) => {
            let _ = host.deregister(rs);
            return Err(err(e));
        }
    };
    let result = timed_copies(host, &rs, &rd, size, total);
    // Deregistered on every path, so repeated runs never exhaust the region table.
    let (a, b) = (host.deregister(rs), host.deregister(rd));
    let secs = result?;
    a.and(b).map_err(err)?;
    if dst.to_vec(0, size).map_err(err)? != data {
        return Err(format!("{size}-byte copies delivered wrong bytes"));
    }
    Ok((total / size).max(1) as f64 * size as f64 / secs)
}

/// Keeps the ring full of `size`-byte COPYs until `total` bytes moved; returns the seconds.
fn timed_copies(
    host: &mut Host,
    rs: &crate::Region,
    rd: &crate::Region,
    size: usize,
    total: usize,
) -> Check<f64> {
    let count = (total / size).max(1);
    let t = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < count {
        while posted < count {
            let cookie = host.next_cookie();
            match host.try_post(&SubmissionDescriptor::copy(cookie, rd.at(0), rs.at(0), size as u64)) {
                Ok(()) => posted += 1,
                Err(Error::WouldBlock { .. }) => break,
                Err(e) => return Err(err(e)),
            }
        }
        let c = host.wait().map_err(err)?;
        if !c.status.is_ok() {
            return Err(format!("copy failed: {:?}", c.status));
        }
        done += 1;
    }
    Ok(t.elapsed().as_secs_f64())
}
