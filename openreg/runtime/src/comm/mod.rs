//! OCCL, the OpenReg collective communication library: what NCCL is to CUDA. It knows
//! nothing about PyTorch: ranks, device buffers, element types, streams.
//!
//! | concept | file |
//! |---|---|
//! | element types and reductions | [`reduce`] |
//! | connections and messages (TCP) | [`transport`] |
//! | shared memory between ranks on one host | `shm` |
//! | communicators and the collectives' algorithms | this file |
//!
//! A collective is queued on a stream like a kernel and runs on its worker, in the order the
//! host issued it: every rank must issue the same collectives in the same order, as with NCCL.

pub mod reduce;
mod shm;
pub mod transport;

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::stream::Stream;
pub use reduce::{DataType, ReduceOp};
use transport::{Header, Link, Pending};
pub use transport::Listener;

/// Messages up to this size are all-reduced by sending them to every peer at once (one
/// step: latency), larger ones around a ring (2(n-1)/n of the data per rank: bandwidth).
pub const DIRECT_MAX_BYTES: usize = 64 * 1024;
/// How long a host thread waiting for an operation polls before it sleeps.
const POLL: Duration = Duration::from_micros(200);
/// Broadcasts travel down the chain of ranks in pieces of this size, so that every rank
/// forwards one piece while it receives the next.
const BROADCAST_PIECE: usize = 1 << 20;

/// A device buffer as the runtime sees it (its read/write view): address and length.
#[derive(Clone, Copy, Debug)]
pub struct Buf {
    pub ptr: *mut u8,
    pub len: usize,
}

// A collective runs on a stream's worker; the caller keeps the memory alive until it completes.
unsafe impl Send for Buf {}

impl Buf {
    fn bytes(&self) -> &'static mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// ANCHOR: op
/// One collective or point-to-point operation, with its buffers. Lengths are in bytes.
#[derive(Clone, Debug)]
pub enum Op {
    AllReduce { buf: Buf, dtype: DataType, op: ReduceOp },
    Broadcast { buf: Buf, dtype: DataType, root: usize },
    Reduce { buf: Buf, dtype: DataType, op: ReduceOp, root: usize },
    /// `output` holds `size` copies of `input`'s length, rank `i`'s at position `i`.
    AllGather { input: Buf, output: Buf, dtype: DataType },
    /// `input` holds `size` blocks of `output`'s length; rank `i` receives block `i` reduced.
    ReduceScatter { input: Buf, output: Buf, dtype: DataType, op: ReduceOp },
    /// Block `j` of `input` (`input_splits[j]` bytes) goes to rank `j`; block `i` of `output`
    /// comes from rank `i`.
    AllToAll { input: Buf, input_splits: Vec<usize>, output: Buf, output_splits: Vec<usize>, dtype: DataType },
    /// `output` (on the root only) as in `AllGather`.
    Gather { input: Buf, output: Option<Buf>, dtype: DataType, root: usize },
    /// `input` (on the root only) holds `size` blocks; rank `i` receives block `i`.
    Scatter { input: Option<Buf>, output: Buf, dtype: DataType, root: usize },
    Send { buf: Buf, dtype: DataType, peer: usize },
    Recv { buf: Buf, dtype: DataType, peer: usize },
    Barrier,
}
// ANCHOR_END: op

impl Op {
    /// The operation's number in message headers; point-to-point messages share one.
    fn code(&self) -> u16 {
        match self {
            Op::AllReduce { .. } => 1,
            Op::Broadcast { .. } => 2,
            Op::Reduce { .. } => 3,
            Op::AllGather { .. } => 4,
            Op::ReduceScatter { .. } => 5,
            Op::AllToAll { .. } => 6,
            Op::Gather { .. } => 7,
            Op::Scatter { .. } => 8,
            Op::Send { .. } | Op::Recv { .. } => 9,
            Op::Barrier => 10,
        }
    }

    pub fn name(&self) -> &'static str {
        op_name(self.code())
    }

    fn dtype(&self) -> Option<DataType> {
        match self {
            Op::AllReduce { dtype, .. }
            | Op::Broadcast { dtype, .. }
            | Op::Reduce { dtype, .. }
            | Op::AllGather { dtype, .. }
            | Op::ReduceScatter { dtype, .. }
            | Op::AllToAll { dtype, .. }
            | Op::Gather { dtype, .. }
            | Op::Scatter { dtype, .. }
            | Op::Send { dtype, .. }
            | Op::Recv { dtype, .. } => Some(*dtype),
            Op::Barrier => None,
        }
    }
}

pub(crate) fn op_name(code: u16) -> &'static str {
    const NAMES: [&str; 10] =
        ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "send/recv", "barrier"];
    NAMES.get((code as usize).wrapping_sub(1)).copied().unwrap_or("an unknown operation")
}

// ANCHOR: work
/// The completion of one queued operation, shared by the stream's worker (which completes it)
/// and the host (which waits for it).
pub struct Work {
    pub name: &'static str,
    pub seq: u64,
    outcome: Mutex<Option<std::result::Result<(), String>>>,
    completed: Condvar,
}

impl Work {
    fn complete(&self, outcome: Result<()>) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome.map_err(|e| e.to_string()));
        self.completed.notify_all();
    }

    /// Waits for completion, at most `timeout`; `None` if still running then.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<std::result::Result<(), String>> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // Look again and again, yielding the core, before sleeping: a small collective
        // completes within microseconds, and waking a sleeping thread costs tens of them on
        // a virtual machine (as `synchronize` does for streams).
        let poll = timeout.map_or(POLL, |t| t.min(POLL));
        while start.elapsed() < poll {
            if let Some(outcome) = self.poll() {
                return Some(outcome);
            }
            std::thread::yield_now();
        }
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        while outcome.is_none() {
            outcome = match deadline {
                None => self.completed.wait(outcome).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.completed.wait_timeout(outcome, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
        outcome.clone()
    }

    /// The outcome if it completed.
    pub fn poll(&self) -> Option<std::result::Result<(), String>> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
// ANCHOR_END: work

/// The order operations run in, and the sequence numbers their messages carry.
struct Order {
    /// Tickets handed out at launch, and the one whose turn it is on the workers.
    issued: u64,
    turn: u64,
    /// Collectives launched so far: every rank numbers them alike.
    collectives: u64,
    /// Point-to-point messages launched per peer, each way.
    sent: Vec<u64>,
    received: Vec<u64>,
    /// Set by the first failure: the communicator is unusable after it, as NCCL's after abort.
    broken: Option<String>,
}

// ANCHOR: communicator
/// One rank's view of a group of `size` processes connected to each other.
pub struct Communicator {
    rank: usize,
    size: usize,
    links: Vec<Option<Link>>,
    timeout: Duration,
    order: Mutex<Order>,
    turn_changed: Condvar,
}
// ANCHOR_END: communicator

impl Communicator {
    /// Connects this rank to the others (`addresses[i]` is rank `i`'s `host:port`, as each
    /// rank published its [`Listener`]'s); every later receive gives up after `timeout`.
    /// `shared_memory`: peers on this host exchange bytes through shared memory (TCP else).
    pub fn connect(
        listener: Listener,
        rank: usize,
        size: usize,
        addresses: &[String],
        timeout: Duration,
        shared_memory: bool,
    ) -> Result<Arc<Communicator>> {
        if size == 0 || rank >= size {
            return Err(Error::InvalidValue(format!("occl: rank {rank} is out of range for a world of size {size} (expected 0 <= rank < {size})")));
        }
        if addresses.len() != size {
            return Err(Error::InvalidValue(format!("occl: {} addresses for a world of size {size}", addresses.len())));
        }
        let links = transport::connect_all(listener, rank, size, addresses, timeout, shared_memory)?;
        Ok(Arc::new(Communicator {
            rank,
            size,
            links,
            timeout,
            order: Mutex::new(Order { issued: 0, turn: 0, collectives: 0, sent: vec![0; size], received: vec![0; size], broken: None }),
            turn_changed: Condvar::new(),
        }))
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How this rank reaches each rank: "shm", "tcp", or "self".
    pub fn transports(&self) -> Vec<&'static str> {
        self.links.iter().map(|l| l.as_ref().map_or("self", Link::transport)).collect()
    }

    /// Why the communicator was aborted, if it was.
    pub fn failure(&self) -> Option<String> {
        self.lock().broken.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Order> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn link(&self, peer: usize) -> &Link {
        self.links[peer].as_ref().expect("a link to every other rank")
    }

    // ANCHOR: launch
    /// Checks `op` and queues it on `stream`; the returned [`Work`] completes when it ran.
    pub fn launch(self: &Arc<Self>, stream: &Stream, op: Op) -> Result<Arc<Work>> {
        self.check(&op)?;
        crate::stream::check_may_wait("an occl collective", Some(*stream))?;
        let mut order = self.lock();
        if let Some(why) = &order.broken {
            return Err(Error::InvalidValue(format!("occl: the communicator was aborted by an earlier failure: {why}")));
        }
        let counter = match &op {
            Op::Send { peer, .. } => &mut order.sent[*peer],
            Op::Recv { peer, .. } => &mut order.received[*peer],
            _ => &mut order.collectives,
        };
        let seq = *counter;
        *counter += 1;
        let ticket = order.issued;
        let work = Arc::new(Work { name: op.name(), seq, outcome: Mutex::new(None), completed: Condvar::new() });
        let (comm, done) = (self.clone(), work.clone());
        // The worker runs the operation when every operation issued before it has run: two
        // streams must not interleave their messages on the same connections.
        if let Err(e) = stream.launch(move || done.complete(comm.run(ticket, seq, &op))) {
            order.broken = Some(format!("launching on the stream failed: {e}"));
            return Err(e);
        }
        order.issued += 1;
        Ok(work)
    }
    // ANCHOR_END: launch

    /// The arguments' checks, made on the host when the operation is issued.
    fn check(&self, op: &Op) -> Result<()> {
        let (n, name) = (self.size, op.name());
        let bad = |what: String| Err(Error::InvalidValue(format!("occl {name}: {what}")));
        let rank_ok = |r: usize, what: &str| {
            if r >= n { bad(format!("{what} {r} is out of range for a group of size {n} (expected 0 <= {what} < {n})")) } else { Ok(()) }
        };
        if let Some(dtype) = op.dtype() {
            let bufs: Vec<&Buf> = match op {
                Op::AllReduce { buf, .. } | Op::Broadcast { buf, .. } | Op::Reduce { buf, .. } => vec![buf],
                Op::Send { buf, .. } | Op::Recv { buf, .. } => vec![buf],
                Op::AllGather { input, output, .. } | Op::ReduceScatter { input, output, .. } | Op::AllToAll { input, output, .. } => vec![input, output],
                Op::Gather { input, output, .. } => std::iter::once(input).chain(output).collect(),
                Op::Scatter { input, output, .. } => std::iter::once(output).chain(input).collect(),
                Op::Barrier => vec![],
            };
            for b in bufs {
                if !b.len.is_multiple_of(dtype.size()) || !(b.ptr as usize).is_multiple_of(dtype.size()) {
                    return bad(format!("a buffer of {} bytes at {:#x} does not hold whole {dtype:?} elements", b.len, b.ptr as usize));
                }
            }
        }
        match op {
            Op::AllReduce { dtype, op, .. } | Op::Reduce { dtype, op, .. } | Op::ReduceScatter { dtype, op, .. } if !op.supports(*dtype) => {
                bad(format!("{op:?} is not defined for {dtype:?}"))
            }
            Op::Broadcast { root, .. } | Op::Reduce { root, .. } | Op::Gather { root, .. } | Op::Scatter { root, .. } => {
                rank_ok(*root, "root")?;
                match op {
                    Op::Gather { input, output, root, .. } if *root == self.rank => match output {
                        Some(o) if o.len == n * input.len => Ok(()),
                        Some(o) => bad(format!("the root's output holds {} bytes; expected {n} x {} bytes", o.len, input.len)),
                        None => bad("the root needs an output buffer".into()),
                    },
                    Op::Scatter { input, output, root, .. } if *root == self.rank => match input {
                        Some(i) if i.len == n * output.len => Ok(()),
                        Some(i) => bad(format!("the root's input holds {} bytes; expected {n} x {} bytes", i.len, output.len)),
                        None => bad("the root needs an input buffer".into()),
                    },
                    _ => Ok(()),
                }
            }
            Op::AllGather { input, output, .. } if output.len != n * input.len => {
                bad(format!("the output holds {} bytes; expected {n} x {} bytes (the group's size times the input)", output.len, input.len))
            }
            Op::ReduceScatter { input, output, .. } if input.len != n * output.len => {
                bad(format!("the input holds {} bytes; expected {n} x {} bytes (the group's size times the output)", input.len, output.len))
            }
            Op::AllToAll { input, input_splits, output, output_splits, .. } => {
                if input_splits.len() != n || output_splits.len() != n {
                    return bad(format!("{} input and {} output splits for a group of size {n}", input_splits.len(), output_splits.len()));
                }
                if input_splits.iter().sum::<usize>() != input.len || output_splits.iter().sum::<usize>() != output.len {
                    return bad("the splits do not add up to the buffers' lengths".into());
                }
                if input_splits[self.rank] != output_splits[self.rank] {
                    return bad(format!(
                        "this rank sends itself {} bytes but expects {} from itself",
                        input_splits[self.rank], output_splits[self.rank]
                    ));
                }
                Ok(())
            }
            Op::Send { peer, .. } | Op::Recv { peer, .. } => {
                rank_ok(*peer, "peer")?;
                if *peer == self.rank { bad(format!("rank {peer} cannot exchange messages with itself")) } else { Ok(()) }
            }
            _ => Ok(()),
        }
    }

    // ANCHOR: run
    /// Runs the operation with `ticket` when its turn comes; a failure aborts the communicator
    /// and tells every peer why, so that no rank waits for a dead one until its timeout.
    fn run(&self, ticket: u64, seq: u64, op: &Op) -> Result<()> {
        let mut order = self.lock();
        while order.turn != ticket {
            order = self.turn_changed.wait(order).unwrap_or_else(|e| e.into_inner());
        }
        let outcome = match order.broken.clone() {
            Some(why) => Err(Error::InvalidValue(format!("occl: the communicator was aborted by an earlier failure: {why}"))),
            None => {
                drop(order);
                let outcome = self.execute(seq, op);
                order = self.lock();
                if let Err(e) = &outcome {
                    order.broken = Some(e.to_string());
                    for link in self.links.iter().flatten() {
                        link.abort(&e.to_string());
                    }
                }
                outcome
            }
        };
        order.turn += 1;
        self.turn_changed.notify_all();
        outcome
    }
    // ANCHOR_END: run

    /// Gives up: tells every peer and closes the connections (destroy_process_group, abort).
    pub fn abort(&self, why: &str) {
        let mut order = self.lock();
        if order.broken.is_none() {
            order.broken = Some(why.to_string());
            for link in self.links.iter().flatten() {
                link.abort(why);
            }
        }
    }

    fn execute(&self, seq: u64, op: &Op) -> Result<()> {
        let h = Header { what: op.code(), dtype: op.dtype().map_or(0, DataType::code), seq, bytes: 0 };
        let name = op.name();
        let (n, r) = (self.size, self.rank);
        match op {
            Op::AllReduce { buf, dtype, op } => {
                if n == 1 {
                    return Ok(());
                }
                let data = buf.bytes();
                if data.len() <= DIRECT_MAX_BYTES {
                    return self.direct_all_reduce(name, h, data, *dtype, *op);
                }
                let chunks = split(data.len(), *dtype, n);
                self.ring_reduce_scatter(name, h, data, &chunks, *dtype, *op, 0)?;
                if *op == ReduceOp::Avg {
                    reduce::divide(*dtype, &mut data[chunks[(r + 1) % n].clone()], n);
                }
                self.ring_all_gather(name, h, data, &chunks, 0)
            }
            Op::Broadcast { buf, root, .. } => self.chain_broadcast(name, h, buf.bytes(), *root),
            Op::Reduce { buf, dtype, op, root } => {
                let data = buf.bytes();
                let mut scratch = Scratch::copy_of(data);
                let chunks = split(data.len(), *dtype, n);
                if n > 1 {
                    self.ring_reduce_scatter(name, h, scratch.bytes(), &chunks, *dtype, *op, 0)?;
                }
                let own = chunks[(r + 1) % n].clone();
                if *op == ReduceOp::Avg {
                    reduce::divide(*dtype, &mut scratch.bytes()[own.clone()], n);
                }
                if r != *root {
                    return self.link(*root).post(h, &scratch.bytes()[own]).wait(name);
                }
                data[own.clone()].copy_from_slice(&scratch.bytes()[own]);
                for peer in (0..n).filter(|&p| p != r) {
                    let theirs = chunks[(peer + 1) % n].clone();
                    self.link(peer).recv_into(name, h, &mut data[theirs])?;
                }
                Ok(())
            }
            Op::AllGather { input, output, dtype } => {
                let out = output.bytes();
                let len = input.len;
                if input.ptr != unsafe { output.ptr.add(r * len) } {
                    out[r * len..(r + 1) * len].copy_from_slice(input.bytes());
                }
                let chunks: Vec<Range<usize>> = (0..n).map(|i| i * len..(i + 1) * len).collect();
                let _ = dtype;
                self.ring_all_gather(name, h, out, &chunks, n - 1)
            }
            Op::ReduceScatter { input, output, dtype, op } => {
                let len = output.len;
                let mut scratch = Scratch::copy_of(input.bytes());
                let chunks: Vec<Range<usize>> = (0..n).map(|i| i * len..(i + 1) * len).collect();
                if n > 1 {
                    self.ring_reduce_scatter(name, h, scratch.bytes(), &chunks, *dtype, *op, n - 1)?;
                }
                let own = &mut scratch.bytes()[chunks[r].clone()];
                if *op == ReduceOp::Avg {
                    reduce::divide(*dtype, own, n);
                }
                output.bytes().copy_from_slice(own);
                Ok(())
            }
            Op::AllToAll { input, input_splits, output, output_splits, .. } => {
                let (inp, out) = (input.bytes(), output.bytes());
                let offsets = |splits: &[usize]| splits.iter().scan(0, |o, &s| { let start = *o; *o += s; Some(start..*o) }).collect::<Vec<_>>();
                let (ins, outs) = (offsets(input_splits), offsets(output_splits));
                out[outs[r].clone()].copy_from_slice(&inp[ins[r].clone()]);
                for step in 1..n {
                    let (to, from) = ((r + step) % n, (r + n - step) % n);
                    let pending = self.link(to).post(h, &inp[ins[to].clone()]);
                    self.link(from).recv_into(name, h, &mut out[outs[from].clone()])?;
                    pending.wait(name)?;
                }
                Ok(())
            }
            Op::Gather { input, output, root, .. } => {
                if r != *root {
                    return self.link(*root).post(h, input.bytes()).wait(name);
                }
                let (out, len) = (output.expect("checked at launch").bytes(), input.len);
                out[r * len..(r + 1) * len].copy_from_slice(input.bytes());
                for peer in (0..n).filter(|&p| p != r) {
                    self.link(peer).recv_into(name, h, &mut out[peer * len..(peer + 1) * len])?;
                }
                Ok(())
            }
            Op::Scatter { input, output, root, .. } => {
                if r != *root {
                    return self.link(*root).recv_into(name, h, output.bytes());
                }
                let (inp, len) = (input.expect("checked at launch").bytes(), output.len);
                let pending: Vec<Pending> =
                    (0..n).filter(|&p| p != r).map(|p| self.link(p).post(h, &inp[p * len..(p + 1) * len])).collect();
                output.bytes().copy_from_slice(&inp[r * len..(r + 1) * len]);
                pending.into_iter().try_for_each(|p| p.wait(name))
            }
            Op::Send { buf, peer, .. } => self.link(*peer).post(h, buf.bytes()).wait(name),
            Op::Recv { buf, peer, .. } => self.link(*peer).recv_into(name, h, buf.bytes()),
            Op::Barrier => {
                let pending: Vec<Pending> = (0..n).filter(|&p| p != r).map(|p| self.link(p).post(h, &[])).collect();
                for peer in (0..n).filter(|&p| p != r) {
                    self.link(peer).recv_into(name, h, &mut [])?;
                }
                pending.into_iter().try_for_each(|p| p.wait(name))
            }
        }
    }

    // ANCHOR: direct
    /// Small all-reduce: every rank sends its buffer to every other rank and reduces all of
    /// them in rank order, so that every rank computes the same bits in one step.
    fn direct_all_reduce(&self, name: &str, h: Header, data: &mut [u8], dtype: DataType, op: ReduceOp) -> Result<()> {
        let (n, r, len) = (self.size, self.rank, data.len());
        let mut all = Scratch::zeroed(n * len);
        let all = all.bytes();
        all[r * len..(r + 1) * len].copy_from_slice(data);
        let pending: Vec<Pending> = (0..n).filter(|&p| p != r).map(|p| self.link(p).post(h, data)).collect();
        let received = (0..n).filter(|&p| p != r).try_for_each(|p| self.link(p).recv_into(name, h, &mut all[p * len..(p + 1) * len]));
        pending.into_iter().try_for_each(|p| p.wait(name))?;
        received?;
        let (first, rest) = all.split_at_mut(len);
        for other in rest.chunks_exact(len.max(1)).take(n - 1) {
            reduce::reduce_into(dtype, op, first, other);
        }
        if op == ReduceOp::Avg {
            reduce::divide(dtype, first, n);
        }
        data.copy_from_slice(first);
        Ok(())
    }
    // ANCHOR_END: direct

    // ANCHOR: ring
    /// Ring reduce-scatter over `chunks` of `data`: in step `s`, rank `r` sends chunk
    /// `r - s + shift` to rank `r + 1` and adds chunk `r - s - 1 + shift`, received from rank
    /// `r - 1`, into its own. After `n - 1` steps rank `r` holds chunk `r + 1 + shift` reduced
    /// over all ranks (indices mod n).
    #[allow(clippy::too_many_arguments)]
    fn ring_reduce_scatter(
        &self,
        name: &str,
        h: Header,
        data: &mut [u8],
        chunks: &[Range<usize>],
        dtype: DataType,
        op: ReduceOp,
        shift: usize,
    ) -> Result<()> {
        let (n, r) = (self.size, self.rank);
        let (next, prev) = (self.link((r + 1) % n), self.link((r + n - 1) % n));
        let base = data.as_mut_ptr();
        for s in 0..n - 1 {
            let send = chunks[(r + 2 * n - s + shift) % n].clone();
            let recv = chunks[(r + 2 * n - s - 1 + shift) % n].clone();
            // The two chunks are disjoint: the writer reads one while this thread adds into the other.
            let sending = next.post(h, unsafe { std::slice::from_raw_parts(base.add(send.start), send.len()) });
            let acc = unsafe { std::slice::from_raw_parts_mut(base.add(recv.start), recv.len()) };
            prev.recv(name, h, acc.len(), |offset, piece| {
                reduce::reduce_into(dtype, op, &mut acc[offset..offset + piece.len()], piece)
            })?;
            sending.wait(name)?;
        }
        Ok(())
    }

    /// Ring all-gather: rank `r` starts with chunk `r + 1 + shift` and, in step `s`, forwards
    /// chunk `r + 1 + shift - s` and receives chunk `r + shift - s` in place.
    fn ring_all_gather(&self, name: &str, h: Header, data: &mut [u8], chunks: &[Range<usize>], shift: usize) -> Result<()> {
        let (n, r) = (self.size, self.rank);
        let (next, prev) = (self.link((r + 1) % n), self.link((r + n - 1) % n));
        let base = data.as_mut_ptr();
        for s in 0..n - 1 {
            let send = chunks[(r + 2 * n + 1 + shift - s) % n].clone();
            let recv = chunks[(r + 2 * n + shift - s) % n].clone();
            let sending = next.post(h, unsafe { std::slice::from_raw_parts(base.add(send.start), send.len()) });
            prev.recv_into(name, h, unsafe { std::slice::from_raw_parts_mut(base.add(recv.start), recv.len()) })?;
            sending.wait(name)?;
        }
        Ok(())
    }
    // ANCHOR_END: ring

    /// Broadcast down the chain root, root + 1, ...: each rank receives a piece from the rank
    /// before it and forwards it to the next while it receives the following one.
    fn chain_broadcast(&self, name: &str, h: Header, data: &mut [u8], root: usize) -> Result<()> {
        let (n, r) = (self.size, self.rank);
        if n == 1 {
            return Ok(());
        }
        let next = (r + 1) % n;
        let forward = (next != root).then(|| self.link(next));
        let pieces: Vec<Range<usize>> = if data.is_empty() {
            std::iter::once(0..0).collect() // one empty message: the ranks still meet
        } else {
            (0..data.len()).step_by(BROADCAST_PIECE).map(|s| s..(s + BROADCAST_PIECE).min(data.len())).collect()
        };
        let base = data.as_mut_ptr();
        let piece = |p: &Range<usize>| unsafe { std::slice::from_raw_parts_mut(base.add(p.start), p.len()) };
        let mut sending: Option<Pending> = None;
        for p in &pieces {
            if r != root {
                self.link((r + n - 1) % n).recv_into(name, h, piece(p))?;
            }
            if let Some(link) = forward {
                match sending.as_mut() {
                    None => sending = Some(link.post(h, piece(p))),
                    Some(pending) => link.post_more(pending, h, piece(p)),
                }
            }
        }
        sending.map_or(Ok(()), |p| p.wait(name))
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        for link in self.links.iter().flatten() {
            link.close();
        }
    }
}

/// Splits `len` bytes of `dtype` elements into `n` chunks of whole elements, as even as can be.
fn split(len: usize, dtype: DataType, n: usize) -> Vec<Range<usize>> {
    let (elements, size) = (len / dtype.size(), dtype.size());
    (0..n).map(|i| (i * elements / n) * size..((i + 1) * elements / n) * size).collect()
}

/// A temporary buffer aligned for any element type.
struct Scratch(Vec<u64>, usize);

impl Scratch {
    fn zeroed(len: usize) -> Scratch {
        Scratch(vec![0u64; len.div_ceil(8)], len)
    }

    fn copy_of(bytes: &[u8]) -> Scratch {
        let mut s = Scratch::zeroed(bytes.len());
        s.bytes().copy_from_slice(bytes);
        s
    }

    fn bytes(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.1) }
    }
}
