//! Shared memory between two processes on one host: a segment with one ring buffer per
//! direction. The TCP connection stays open beside it: it introduces the segment, carries a
//! failing rank's abort message, and its closing tells a peer that the other process is gone
//! (a shared counter cannot).

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Bytes of each ring. Small enough for the default 64 MiB `/dev/shm` of a container with
/// many pairs of ranks; a transfer streams through it in pieces.
const RING: usize = 1 << 20;
/// Each ring's two counters, a cache line each.
const HEADER: usize = 128;
const SEGMENT: usize = 2 * (HEADER + RING);

/// One direction: `head` counts bytes ever written, `tail` bytes ever read.
struct Ring {
    base: *mut u8,
}

impl Ring {
    fn head(&self) -> &AtomicU64 {
        unsafe { &*(self.base as *const AtomicU64) }
    }

    fn tail(&self) -> &AtomicU64 {
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }

    fn data(&self) -> *mut u8 {
        unsafe { self.base.add(HEADER) }
    }
}

/// How a waiting side learns that it should give up (the peer's TCP connection said so, or
/// the timeout passed, counted from the instant given): the error to report.
pub(crate) type Check<'a> = &'a dyn Fn(Instant) -> io::Result<()>;

// ANCHOR: pipe
/// A shared-memory pipe to one peer: this process writes `send` and reads `recv`.
pub(crate) struct Pipe {
    map: *mut u8,
    send: Ring,
    recv: Ring,
    /// The name while this process may still need to remove it.
    name: Option<CString>,
}
// ANCHOR_END: pipe

// The rings are used by one writer thread and one reader thread, through atomics.
unsafe impl Send for Pipe {}
unsafe impl Sync for Pipe {}

impl Pipe {
    /// Creates a new segment named `name` (the connecting side).
    pub fn create(name: &str) -> Result<Pipe> {
        Self::map(name, true)
    }

    /// Opens the segment the peer created, and removes its name: from now on only the two
    /// mappings keep it alive, so nothing is left behind whatever happens to the processes.
    pub fn open(name: &str) -> Result<Pipe> {
        let mut pipe = Self::map(name, false)?;
        pipe.unlink();
        Ok(pipe)
    }

    fn map(name: &str, create: bool) -> Result<Pipe> {
        let c = CString::new(name).map_err(|_| Error::InvalidValue(format!("bad shared memory name {name:?}")))?;
        let flags = if create { libc::O_CREAT | libc::O_EXCL | libc::O_RDWR } else { libc::O_RDWR };
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(Error::last_os("shm_open"));
        }
        let close = |e| {
            unsafe { libc::close(fd) };
            if create {
                unsafe { libc::shm_unlink(c.as_ptr()) };
            }
            Err(e)
        };
        // Reserve the pages now: a full /dev/shm must be an error here, not SIGBUS later.
        if create && unsafe { libc::posix_fallocate(fd, 0, SEGMENT as libc::off_t) } != 0 {
            return close(Error::InvalidValue(format!("no room for {SEGMENT} bytes of shared memory in /dev/shm")));
        }
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), SEGMENT, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if map == libc::MAP_FAILED {
            return close(Error::last_os("mmap"));
        }
        unsafe { libc::close(fd) };
        let map = map.cast::<u8>();
        let (first, second) = (Ring { base: map }, Ring { base: unsafe { map.add(HEADER + RING) } });
        // The creator writes the first ring, the peer the second.
        let (send, recv) = if create { (first, second) } else { (second, first) };
        Ok(Pipe { map, send, recv, name: Some(c) })
    }

    /// Removes the segment's name (the mappings stay valid).
    pub fn unlink(&mut self) {
        if let Some(name) = self.name.take() {
            unsafe { libc::shm_unlink(name.as_ptr()) };
        }
    }

    // ANCHOR: write
    /// Writes all of `bytes`, as fast as the reader frees room.
    pub fn write(&self, mut bytes: &[u8], check: Check) -> io::Result<()> {
        let ring = &self.send;
        let mut tail = ring.tail().load(Ordering::Acquire);
        let head = ring.head().load(Ordering::Relaxed);
        let mut head = head;
        let mut waiting = Waiting::new();
        while !bytes.is_empty() {
            let room = RING - (head - tail) as usize;
            if room == 0 {
                waiting.pause(check)?;
                tail = ring.tail().load(Ordering::Acquire);
                continue;
            }
            waiting = Waiting::new();
            let at = head as usize % RING;
            let n = room.min(bytes.len()).min(RING - at); // up to the ring's end
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ring.data().add(at), n) };
            head += n as u64;
            ring.head().store(head, Ordering::Release); // the reader may use them now
            bytes = &bytes[n..];
        }
        Ok(())
    }
    // ANCHOR_END: write

    /// Reads `len` bytes, handing each contiguous run to `sink(offset, bytes)` straight from
    /// the shared memory (no copy in between), at most `piece` bytes at a time.
    pub fn read(&self, len: usize, piece: usize, check: Check, mut sink: impl FnMut(usize, &[u8])) -> io::Result<()> {
        let ring = &self.recv;
        let mut tail = ring.tail().load(Ordering::Relaxed);
        let mut head = ring.head().load(Ordering::Acquire);
        let mut waiting = Waiting::new();
        let mut offset = 0;
        while offset < len {
            if head == tail {
                waiting.pause(check)?;
                head = ring.head().load(Ordering::Acquire);
                continue;
            }
            waiting = Waiting::new();
            let at = tail as usize % RING;
            let n = ((head - tail) as usize).min(len - offset).min(RING - at).min(piece);
            sink(offset, unsafe { std::slice::from_raw_parts(ring.data().add(at), n) });
            offset += n;
            tail += n as u64;
            ring.tail().store(tail, Ordering::Release); // the writer may reuse them now
        }
        Ok(())
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.unlink();
        unsafe { libc::munmap(self.map.cast(), SEGMENT) };
    }
}

// ANCHOR: waiting
/// Waiting for the other process: yield the core for a while (a peer that is about to write
/// is served fastest), then sleep in short steps, asking `check` every millisecond whether to
/// give up.
struct Waiting {
    since: Instant,
    checked: Instant,
}

impl Waiting {
    fn new() -> Waiting {
        let now = Instant::now();
        Waiting { since: now, checked: now }
    }

    fn pause(&mut self, check: Check) -> io::Result<()> {
        let now = Instant::now();
        if now.duration_since(self.checked) >= Duration::from_millis(1) {
            self.checked = now;
            check(self.since)?;
        }
        if now.duration_since(self.since) < Duration::from_micros(100) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }
}
// ANCHOR_END: waiting
