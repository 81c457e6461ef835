//! The bytes between ranks: one TCP connection per pair of ranks (a full mesh), so that it
//! works across hosts. Every message is a header and a payload; the header lets a receiver
//! notice a peer that called another collective, or passed another size or type, instead of
//! reading garbage. Each connection has a writer thread, so that a rank sends and receives at
//! the same time (a ring step does both; blocking on a send would deadlock the ring).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::shm::Pipe;
use crate::error::{Error, Result};

const MAGIC: u32 = 0x4f43_434c; // "OCCL"
const HEADER: usize = 24;
/// `Header::what` of the message a failing rank sends before it closes its connections.
pub(crate) const ABORT: u16 = 0xffff;

// ANCHOR: header
/// What precedes every payload: which operation sent it (`what`), its element type, the
/// operation's sequence number, and the payload's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub what: u16,
    pub dtype: u16,
    pub seq: u64,
    pub bytes: u64,
}
// ANCHOR_END: header

impl Header {
    fn encode(&self) -> [u8; HEADER] {
        let mut out = [0u8; HEADER];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&self.what.to_le_bytes());
        out[6..8].copy_from_slice(&self.dtype.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..24].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    fn decode(raw: &[u8; HEADER]) -> Option<Header> {
        let word = |r: std::ops::Range<usize>| raw[r].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
        (word(0..4) as u32 == MAGIC).then(|| Header {
            what: word(4..6) as u16,
            dtype: word(6..8) as u16,
            seq: word(8..16),
            bytes: word(16..24),
        })
    }
}

/// A payload the writer thread sends: an address the sender keeps alive until `done`.
struct Job {
    header: Header,
    data: *const u8,
    /// The payload when the job owns it (an abort message).
    _owned: Option<Vec<u8>>,
    then_close: bool,
}

// The address is only read by the writer while the posting thread waits for `done`.
unsafe impl Send for Job {}

/// A connection to one peer: TCP, and a shared-memory pipe when the peer is on this host.
pub(crate) struct Link {
    pub peer: usize,
    reader: Mutex<TcpStream>,
    socket: TcpStream,
    jobs: Sender<Job>,
    done: Mutex<Receiver<io::Result<()>>>,
    pipe: Option<Arc<Pipe>>,
    timeout: Duration,
}

/// Whether the peer is still there, asked by a side waiting on shared memory: its connection
/// closed (`UnexpectedEof`), it sent something over TCP, which can only be an abort message
/// (`Interrupted`: read it), or the wait started at `since` outlasted `timeout` (`TimedOut`).
fn peer_state(socket: &TcpStream, since: Instant, timeout: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    let n = unsafe {
        libc::recv(socket.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    match n {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        n if n > 0 => Err(io::ErrorKind::Interrupted.into()),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
            if since.elapsed() >= timeout { Err(io::ErrorKind::TimedOut.into()) } else { Ok(()) }
        }
    }
}

/// Sends posted with [`Link::post`] that have not been waited for yet.
#[must_use = "a posted send must be waited for before its buffer goes away"]
pub(crate) struct Pending<'a> {
    link: &'a Link,
    count: usize,
}

impl Pending<'_> {
    /// Waits until every posted send has been handed to the operating system.
    pub fn wait(mut self, op: &str) -> Result<()> {
        let mut result = Ok(());
        while self.count > 0 {
            self.count -= 1;
            let done = self.link.done.lock().unwrap_or_else(|e| e.into_inner());
            let outcome = done.recv().unwrap_or_else(|_| Err(io::ErrorKind::BrokenPipe.into()));
            if let Err(e) = outcome {
                result = result.and(Err(self.link.io_error(e, op, "sending to")));
            }
        }
        result
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // The buffers the writer reads must outlive the sends, even on an error path.
        if self.count > 0 {
            let done = self.link.done.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..self.count {
                let _ = done.recv();
            }
        }
    }
}

impl Link {
    fn new(peer: usize, socket: TcpStream, timeout: Duration, pipe: Option<Pipe>) -> Result<Link> {
        let sys = |e: io::Error| Error::InvalidValue(format!("occl: configuring the connection to rank {peer}: {e}"));
        socket.set_nodelay(true).map_err(sys)?;
        set_buffers(&socket, 4 << 20);
        socket.set_read_timeout(Some(timeout)).map_err(sys)?;
        socket.set_write_timeout(Some(timeout)).map_err(sys)?;
        let mut writer = socket.try_clone().map_err(sys)?;
        let reader = socket.try_clone().map_err(sys)?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (report, done) = mpsc::channel();
        let pipe = pipe.map(Arc::new);
        let shared = pipe.clone();
        std::thread::Builder::new()
            .name(format!("occl send to {peer}"))
            .spawn(move || {
                for job in inbox {
                    let payload = unsafe { std::slice::from_raw_parts(job.data, job.header.bytes as usize) };
                    let header = job.header.encode();
                    let outcome = match &shared {
                        // Aborts always go over TCP: that is where a waiting peer looks for them.
                        Some(pipe) if job.header.what != ABORT => {
                            let alive = |since: Instant| peer_state(&writer, since, timeout);
                            pipe.write(&header, &alive).and_then(|()| pipe.write(payload, &alive))
                        }
                        _ => writer.write_all(&header).and_then(|()| writer.write_all(payload)),
                    };
                    if job.then_close {
                        let _ = writer.shutdown(Shutdown::Both);
                    }
                    if report.send(outcome).is_err() {
                        return;
                    }
                }
            })
            .map_err(sys)?;
        Ok(Link { peer, reader: Mutex::new(reader), socket, jobs, done: Mutex::new(done), pipe, timeout })
    }

    // ANCHOR: post
    /// Queues `data` for the writer thread and returns at once; the caller must keep `data`
    /// alive and unchanged until it waits for the returned [`Pending`].
    pub fn post<'a>(&'a self, header: Header, data: &[u8]) -> Pending<'a> {
        let header = Header { bytes: data.len() as u64, ..header };
        let count = usize::from(self.jobs.send(Job { header, data: data.as_ptr(), _owned: None, then_close: false }).is_ok());
        if count == 0 {
            // The writer is gone (the link was closed): report it like a failed send.
            let _ = self.socket.shutdown(Shutdown::Both);
        }
        Pending { link: self, count }
    }
    // ANCHOR_END: post

    /// "shm" or "tcp": how the payloads travel to this peer.
    pub fn transport(&self) -> &'static str {
        if self.pipe.is_some() { "shm" } else { "tcp" }
    }

    /// Adds another send to `pending` (several sends on one link, waited for together).
    pub fn post_more<'a>(&'a self, pending: &mut Pending<'a>, header: Header, data: &[u8]) {
        let header = Header { bytes: data.len() as u64, ..header };
        if self.jobs.send(Job { header, data: data.as_ptr(), _owned: None, then_close: false }).is_ok() {
            pending.count += 1;
        }
    }

    /// Tells the peer why this rank gives up, then closes the connection.
    pub fn abort(&self, message: &str) {
        let message = message.as_bytes().to_vec();
        let header = Header { what: ABORT, dtype: 0, seq: 0, bytes: message.len() as u64 };
        let _ = self.jobs.send(Job { header, data: message.as_ptr(), _owned: Some(message), then_close: true });
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        // Give the writer a moment; a peer that does not read must not hold us up.
        let _ = done.recv_timeout(Duration::from_millis(200));
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    /// Closes the connection (both directions); the peer's reads end.
    pub fn close(&self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    // ANCHOR: recv
    /// Receives one message that must match `expect` (same operation, type and sequence
    /// number, `len` bytes), handing its payload to `sink` piece by piece as it arrives
    /// (`sink(offset, bytes)`), so that a reduction overlaps with the transfer.
    pub fn recv(&self, op: &str, expect: Header, len: usize, mut sink: impl FnMut(usize, &[u8])) -> Result<()> {
        const PIECE: usize = 1 << 18;
        let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let failed = |e: io::Error| self.io_error(e, op, "receiving from");
        if let Some(pipe) = &self.pipe {
            let alive = |since: Instant| peer_state(&self.socket, since, self.timeout);
            let mut raw = [0u8; HEADER];
            let header = pipe.read(HEADER, HEADER, &alive, |at, bytes| raw[at..at + bytes.len()].copy_from_slice(bytes));
            match header {
                // Something came over TCP instead: the peer's abort message.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return Err(self.read_tcp_header(&mut reader, op).err().unwrap_or_else(|| failed(e))),
                Err(e) => return Err(failed(e)),
                Ok(()) => self.check_header(op, Header::decode(&raw), expect, len)?,
            }
            return pipe.read(len, PIECE, &alive, sink).map_err(failed);
        }
        let header = self.read_tcp_header(&mut reader, op)?;
        self.check_header(op, Some(header), expect, len)?;
        let mut piece = vec![0u64; PIECE.min(len).div_ceil(8)];
        let piece: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(piece.as_mut_ptr().cast(), piece.len() * 8) };
        let mut offset = 0;
        while offset < len {
            let n = PIECE.min(len - offset);
            reader.read_exact(&mut piece[..n]).map_err(failed)?;
            sink(offset, &piece[..n]);
            offset += n;
        }
        Ok(())
    }

    /// Reads a header from the TCP connection; an abort message becomes the peer's error.
    fn read_tcp_header(&self, reader: &mut TcpStream, op: &str) -> Result<Header> {
        let mut raw = [0u8; HEADER];
        reader.read_exact(&mut raw).map_err(|e| self.io_error(e, op, "receiving from"))?;
        let header = Header::decode(&raw);
        if let Some(h) = header.filter(|h| h.what == ABORT) {
            let mut message = vec![0u8; h.bytes.min(1 << 16) as usize];
            let _ = reader.read_exact(&mut message);
            return Err(Error::InvalidValue(format!(
                "occl {op}: rank {} aborted: {}",
                self.peer,
                String::from_utf8_lossy(&message)
            )));
        }
        header.ok_or_else(|| Error::InvalidValue(format!("occl {op}: rank {} sent bytes that are not an occl message", self.peer)))
    }

    /// The header must announce what this rank expects: same operation, sequence number,
    /// element type and length.
    fn check_header(&self, op: &str, header: Option<Header>, expect: Header, len: usize) -> Result<()> {
        let header = header.ok_or_else(|| {
            Error::InvalidValue(format!("occl {op}: rank {} sent bytes that are not an occl message", self.peer))
        })?;
        if header.what != expect.what || header.seq != expect.seq {
            return Err(Error::InvalidValue(format!(
                "occl {op}: rank {} is in another operation ({} #{}) than this rank ({op} #{}): \
                 every rank must call the same collectives in the same order",
                self.peer,
                super::op_name(header.what),
                header.seq,
                expect.seq
            )));
        }
        if header.bytes != len as u64 || header.dtype != expect.dtype {
            use super::reduce::DataType;
            return Err(Error::InvalidValue(format!(
                "occl {op}: rank {} sent {} bytes of {} where this rank expected {len} bytes of {}: \
                 the tensors' sizes or dtypes differ across ranks",
                self.peer,
                header.bytes,
                DataType::name_of(header.dtype),
                DataType::name_of(expect.dtype)
            )));
        }
        Ok(())
    }
    // ANCHOR_END: recv

    /// Receives straight into `out` (no reduction): no intermediate copy.
    pub fn recv_into(&self, op: &str, expect: Header, out: &mut [u8]) -> Result<()> {
        let len = out.len();
        let base = out.as_mut_ptr();
        self.recv(op, expect, len, |offset, bytes| unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(offset), bytes.len())
        })
    }

    fn io_error(&self, e: io::Error, op: &str, direction: &str) -> Error {
        let peer = self.peer;
        Error::InvalidValue(match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                let timeout = self.timeout;
                format!(
                    "occl {op}: timed out after {:.1} s {direction} rank {peer} (the process group's \
                     timeout); is rank {peer} stuck or in another collective?",
                    timeout.as_secs_f64()
                )
            }
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted => format!(
                "occl {op}: rank {peer} closed its connection while {direction} it (did the process \
                 exit or fail?): {e}"
            ),
            _ => format!("occl {op}: {direction} rank {peer} failed: {e}"),
        })
    }
}

/// Asks for larger kernel socket buffers: fewer wake-ups per megabyte on a fast link. The
/// kernel may grant less (net.core.wmem_max); that only costs speed.
fn set_buffers(socket: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    for option in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

// ANCHOR: connect
/// A listening socket, bound before its address is published in the store.
pub struct Listener(TcpListener);

impl Listener {
    /// Listens on every interface, on a port the system picks.
    pub fn bind() -> Result<Listener> {
        TcpListener::bind("0.0.0.0:0")
            .map(Listener)
            .map_err(|e| Error::InvalidValue(format!("occl: cannot listen for peers: {e}")))
    }

    pub fn port(&self) -> u16 {
        self.0.local_addr().map(|a| a.port()).unwrap_or(0)
    }
}

/// Connects `rank` to every other rank of `size`: it connects to the lower ranks (whose
/// addresses are `addresses[peer]`, `host:port`) and accepts the higher ones, each side
/// introducing itself with its rank; with `shared_memory`, peers on the same host also share a
/// memory segment. Returns the links, indexed by peer (`None` for itself).
pub(crate) fn connect_all(
    listener: Listener,
    rank: usize,
    size: usize,
    addresses: &[String],
    timeout: Duration,
    shared_memory: bool,
) -> Result<Vec<Option<Link>>> {
    let deadline = Instant::now() + timeout;
    let failed = |what: String| Error::InvalidValue(format!("occl: rank {rank} of {size}: {what}"));
    let mut links: Vec<Option<Link>> = (0..size).map(|_| None).collect();
    for (peer, address) in addresses.iter().enumerate().take(rank) {
        let mut socket = loop {
            match TcpStream::connect(address.as_str()) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(failed(format!("cannot connect to rank {peer} at {address}: {e}")));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        // On one host the peer can open a shared-memory segment this rank creates; the name
        // travels in the introduction, the answer says whether the peer could open it.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("/occl.{}.{rank}-{peer}.{nanos}", std::process::id());
        let pipe = shared_memory.then(|| Pipe::create(&name).ok()).flatten();
        let offered = if pipe.is_some() { name.as_str() } else { "" };
        let mut hello = [MAGIC, rank as u32, size as u32, offered.len() as u32].map(u32::to_le_bytes).concat();
        hello.extend_from_slice(offered.as_bytes());
        socket.write_all(&hello).map_err(|e| failed(format!("introducing itself to rank {peer}: {e}")))?;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let mut answer = [0u8];
        socket.set_read_timeout(Some(left)).and_then(|()| socket.read_exact(&mut answer))
            .map_err(|e| failed(format!("waiting for rank {peer}'s answer: {e}")))?;
        let pipe = pipe.filter(|_| answer[0] == 1);
        links[peer] = Some(Link::new(peer, socket, timeout, pipe)?);
    }
    listener.0.set_nonblocking(true).map_err(|e| failed(e.to_string()))?;
    let mut missing = size - rank - 1;
    while missing > 0 {
        match listener.0.accept() {
            Ok((mut socket, _)) => {
                socket.set_nonblocking(false).map_err(|e| failed(e.to_string()))?;
                socket.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))
                    .map_err(|e| failed(e.to_string()))?;
                let mut hello = [0u8; 16];
                if socket.read_exact(&mut hello).is_err() {
                    continue; // not a peer (a port scanner, a peer that gave up): ignore
                }
                let word = |i: usize| u32::from_le_bytes(hello[i * 4..i * 4 + 4].try_into().unwrap());
                let (magic, peer, peer_size, name_len) = (word(0), word(1) as usize, word(2) as usize, word(3) as usize);
                let mut name = vec![0u8; name_len.min(255)];
                if magic != MAGIC || socket.read_exact(&mut name).is_err() {
                    continue;
                }
                if magic != MAGIC || peer_size != size || peer <= rank || peer >= size || links[peer].is_some() {
                    return Err(failed(format!(
                        "a peer introduced itself as rank {peer} of {peer_size}: expected one of ranks {}..{size} \
                         of {size}, each once",
                        rank + 1
                    )));
                }
                // A segment this process cannot open (another host) means TCP only.
                let name = String::from_utf8_lossy(&name);
                let pipe = if name.is_empty() || !shared_memory { None } else { Pipe::open(&name).ok() };
                socket.write_all(&[u8::from(pipe.is_some())]).map_err(|e| failed(format!("answering rank {peer}: {e}")))?;
                links[peer] = Some(Link::new(peer, socket, timeout, pipe)?);
                missing -= 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(failed(format!(
                        "{missing} higher rank(s) did not connect within {:.1} s",
                        timeout.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(failed(format!("accepting a peer: {e}"))),
        }
    }
    Ok(links)
}
// ANCHOR_END: connect
