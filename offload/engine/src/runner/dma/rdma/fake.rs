//! A fake RDMA NIC for unit tests of the `rdma` backend: an [`RcPort`] whose "host" is this
//! test process, reached by cross-memory attach (`cma::Process`), with the checks a responder
//! NIC makes — every READ and WRITE must lie inside a region the host registered, under that
//! region's rkey, else the request completes with `REMOTE_ACCESS_ERROR` and every later one is
//! flushed (the QP is in the error state). Knobs make it fail a request or stay silent.
use super::{RcPort, WorkDone, WorkRequest};
use crate::runner::dma::cma::Process;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// `IBV_WC_WR_FLUSH_ERR`.
pub const FLUSH: u32 = 5;
/// `IBV_WC_REM_ACCESS_ERR`.
pub const REMOTE_ACCESS: u32 = 10;

/// What a test sees of (and does to) the fake NIC.
#[derive(Debug, Default)]
pub struct NicState {
    /// Regions the host registered: (address, length, rkey).
    pub registered: Vec<(u64, u64, u32)>,
    /// Requests posted.
    pub posted: u64,
    /// The next request posted fails with this status.
    pub fail_next: Option<u32>,
    /// Requests complete never.
    pub silent: bool,
    /// In the error state (after a failed request).
    pub error: bool,
    /// Every WRITE carried out: (host address, length).
    pub writes: Vec<(u64, u32)>,
    /// Completions come back late — one poll in two finds none — and the buffer is busy (not
    /// lent) until every one was polled, as on a real queue pair.
    pub deferred: bool,
    /// A completion for a request nobody posted, delivered at the next poll.
    pub stray: Option<u64>,
}

impl NicState {
    /// WRITEs carried out that touched `len` bytes at `addr`.
    pub fn writes_into(&self, addr: u64, len: u64) -> usize {
        self.writes.iter().filter(|&&(a, l)| a < addr + len && addr < a + u64::from(l)).count()
    }
}

/// The fake NIC.
pub struct FakeNic {
    host: Process,
    buffer: Vec<u8>,
    done: VecDeque<WorkDone>,
    state: Arc<Mutex<NicState>>,
    polls: u64,
}

impl FakeNic {
    /// A NIC with a `buffer`-byte local buffer whose host is this process; the state handle
    /// for the test.
    pub fn new(buffer: usize) -> (FakeNic, Arc<Mutex<NicState>>) {
        let state = Arc::new(Mutex::new(NicState::default()));
        let host = Process::open(nix::unistd::Pid::this()).expect("this process");
        let nic = FakeNic {
            host,
            buffer: vec![0; buffer],
            done: VecDeque::new(),
            state: Arc::clone(&state),
            polls: 0,
        };
        (nic, state)
    }
}

impl RcPort for FakeNic {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        // The fake moves the bytes at post time; the buffer counts as busy until the
        // completions were polled (what a real queue pair needs).
        self.done.is_empty().then_some(&mut self.buffer[..])
    }

    fn buffer_len(&self) -> usize {
        self.buffer.len()
    }

    fn post(&mut self, r: WorkRequest) -> Result<(), i32> {
        let local = r.local..r.local + r.len as usize;
        if local.end > self.buffer.len() {
            return Err(0);
        }
        let mut s = self.state.lock().unwrap();
        s.posted += 1;
        if s.silent {
            return Ok(());
        }
        let allowed = s
            .registered
            .iter()
            .any(|&(a, l, k)| k == r.rkey && a <= r.remote && r.remote + u64::from(r.len) <= a + l);
        let status = if s.error {
            Err(FLUSH)
        } else if let Some(st) = s.fail_next.take() {
            Err(st)
        } else if !allowed {
            Err(REMOTE_ACCESS)
        } else {
            let ok = if r.write {
                s.writes.push((r.remote, r.len));
                self.host.write(r.remote, &self.buffer[local])
            } else {
                self.host.read(r.remote, &mut self.buffer[local])
            };
            if ok {
                Ok(())
            } else {
                Err(REMOTE_ACCESS)
            }
        };
        s.error |= status.is_err();
        self.done.push_back(WorkDone { wr_id: r.wr_id, status });
        Ok(())
    }

    fn poll(&mut self) -> Result<Option<WorkDone>, i32> {
        self.polls += 1;
        let mut s = self.state.lock().unwrap();
        if let Some(wr_id) = s.stray.take() {
            return Ok(Some(WorkDone { wr_id, status: Ok(()) }));
        }
        if s.deferred && self.polls % 2 == 1 {
            return Ok(None);
        }
        Ok(self.done.pop_front())
    }

    fn describe(&self) -> String {
        "fake RC QP".into()
    }
}
