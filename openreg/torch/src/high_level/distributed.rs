//! OCCL for the C++ `ProcessGroupOCCL` (`csrc/high_level/ProcessGroupOCCL.cpp`): connecting a
//! communicator and queueing its operations on a stream. PyTorch's types (tensors, `ReduceOp`,
//! `Work`, futures) stay in C++; across this bridge there are only byte ranges and names.
//!
//! A bridge of its own, not a part of `ffi.rs`: only `ProcessGroupOCCL.cpp` includes its
//! header, so a change here recompiles one C++ file.

use std::sync::Arc;
use std::time::Duration;

use openreg_runtime as rt;
use rt::comm::{Buf, DataType, Op, ReduceOp};

// ANCHOR: bridge
#[cxx::bridge(namespace = "openreg::occl")]
mod bridge {
    /// A tensor's bytes (`data_ptr`, `nbytes`) and the storage they lie in.
    #[derive(Clone, Copy, Default)]
    struct Buffer {
        ptr: usize,
        len: usize,
        base: usize,
        base_len: usize,
    }

    enum OpKind {
        AllReduce,
        Broadcast,
        Reduce,
        AllGather,
        ReduceScatter,
        AllToAll,
        Gather,
        Scatter,
        Send,
        Recv,
        Barrier,
    }

    /// One operation as `ProcessGroupOCCL` describes it. In-place operations use `input`;
    /// `has_input`/`has_output` are false for the buffer a non-root rank of gather/scatter
    /// does not have. `root` is the peer of send and recv. Splits are in bytes.
    struct OpArgs {
        kind: OpKind,
        input: Buffer,
        has_input: bool,
        output: Buffer,
        has_output: bool,
        dtype: String,
        reduce_op: String,
        root: usize,
        input_splits: Vec<usize>,
        output_splits: Vec<usize>,
    }

    /// Where a queued operation stands.
    enum Status {
        Running,
        Succeeded,
        Failed,
    }

    extern "Rust" {
        type Listener;
        type Communicator;
        type Work;

        /// A socket bound to a free port, for this rank's peers to connect to.
        fn listen() -> Result<Box<Listener>>;
        /// The address peers use to reach this process.
        fn advertised_host() -> String;
        fn port(self: &Listener) -> u16;

        /// Connects `rank` of `size` to the others (`addresses[r]` is rank r's `host:port`).
        fn connect(
            listener: Box<Listener>,
            rank: usize,
            size: usize,
            addresses: Vec<String>,
            timeout_ms: u64,
            shared_memory: bool,
        ) -> Result<Box<Communicator>>;
        /// Checks `args` and queues the operation on stream `stream` of `device`.
        fn launch(self: &Communicator, device: i64, stream: i64, args: &OpArgs) -> Result<Box<Work>>;
        /// True once a failure or `abort` made the communicator unusable.
        fn broken(self: &Communicator) -> bool;
        fn abort(self: &Communicator, why: &str);
        /// How this rank reaches each rank: "shm", "tcp" or "self".
        fn transports(self: &Communicator) -> Vec<String>;

        /// Waits at most `timeout_ms` (forever if negative); `Running` if still running then.
        fn wait(self: &Work, timeout_ms: i64) -> Status;
        fn status(self: &Work) -> Status;
        /// The failure's message (empty unless `Failed`).
        fn error(self: &Work) -> String;
        /// `"all_reduce #12"`: the operation and its sequence number, for messages.
        fn describe(self: &Work) -> String;
        /// Another handle on the same operation (a coalesced Work holds several).
        fn share(self: &Work) -> Box<Work>;
    }
}
// ANCHOR_END: bridge

use bridge::{Buffer, OpArgs, OpKind, Status};

pub struct Listener(rt::comm::Listener);
pub struct Communicator(Arc<rt::comm::Communicator>);
pub struct Work(Arc<rt::comm::Work>);

fn listen() -> Result<Box<Listener>, String> {
    rt::comm::Listener::bind().map(|l| Box::new(Listener(l))).map_err(|e| e.to_string())
}

/// `OCCL_SOCKET_HOST` if set, else the local interface that routes to `MASTER_ADDR` (across
/// hosts), else loopback.
fn advertised_host() -> String {
    if let Ok(host) = std::env::var("OCCL_SOCKET_HOST") {
        return host;
    }
    let master = std::env::var("MASTER_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
    if ["127.0.0.1", "localhost", "::1"].contains(&master.as_str()) {
        return "127.0.0.1".into();
    }
    let port: u16 = std::env::var("MASTER_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(29500);
    // Connecting a UDP socket sends nothing; it only picks the route, and so the interface.
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect((master.as_str(), port)).and(s.local_addr()))
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

impl Listener {
    fn port(&self) -> u16 {
        self.0.port()
    }
}

fn connect(
    listener: Box<Listener>,
    rank: usize,
    size: usize,
    addresses: Vec<String>,
    timeout_ms: u64,
    shared_memory: bool,
) -> Result<Box<Communicator>, String> {
    let timeout = Duration::from_millis(timeout_ms.max(1));
    rt::comm::Communicator::connect(listener.0, rank, size, &addresses, timeout, shared_memory)
        .map(|c| Box::new(Communicator(c)))
        .map_err(|e| e.to_string())
}

/// The runtime's read/write view of a device tensor's bytes.
fn buffer(b: &Buffer) -> Result<Buf, String> {
    if b.base_len > 0 && rt::device_of(b.base as *const u8).is_none() {
        return Err(format!("occl: the buffer at {:#x} is not openreg device memory", b.ptr));
    }
    if b.len == 0 {
        return Ok(Buf { ptr: b.ptr as *mut u8, len: 0 });
    }
    let view = rt::host_view_within(b.ptr as *const u8, b.len, b.base as *const u8, b.base_len)
        .map_err(|e| format!("occl: {e}"))?;
    Ok(Buf { ptr: view, len: b.len })
}

impl OpArgs {
    /// The runtime's `Op` for these arguments.
    fn op(&self) -> Result<Op, String> {
        let dtype = || {
            DataType::parse(&self.dtype).ok_or_else(|| format!("occl: unsupported dtype {}", self.dtype))
        };
        let reduce = || {
            ReduceOp::parse(&self.reduce_op).ok_or_else(|| format!("occl: unsupported reduce op {}", self.reduce_op))
        };
        let input = || buffer(&self.input);
        let output = || buffer(&self.output);
        let root = self.root;
        Ok(match self.kind {
            OpKind::AllReduce => Op::AllReduce { buf: input()?, dtype: dtype()?, op: reduce()? },
            OpKind::Broadcast => Op::Broadcast { buf: input()?, dtype: dtype()?, root },
            OpKind::Reduce => Op::Reduce { buf: input()?, dtype: dtype()?, op: reduce()?, root },
            OpKind::AllGather => Op::AllGather { input: input()?, output: output()?, dtype: dtype()? },
            OpKind::ReduceScatter => {
                Op::ReduceScatter { input: input()?, output: output()?, dtype: dtype()?, op: reduce()? }
            }
            OpKind::AllToAll => Op::AllToAll {
                input: input()?,
                input_splits: self.input_splits.clone(),
                output: output()?,
                output_splits: self.output_splits.clone(),
                dtype: dtype()?,
            },
            OpKind::Gather => Op::Gather {
                input: input()?,
                output: if self.has_output { Some(output()?) } else { None },
                dtype: dtype()?,
                root,
            },
            OpKind::Scatter => Op::Scatter {
                input: if self.has_input { Some(input()?) } else { None },
                output: output()?,
                dtype: dtype()?,
                root,
            },
            OpKind::Send => Op::Send { buf: input()?, dtype: dtype()?, peer: root },
            OpKind::Recv => Op::Recv { buf: input()?, dtype: dtype()?, peer: root },
            OpKind::Barrier => Op::Barrier,
            _ => return Err("occl: unknown operation".into()),
        })
    }
}

impl Communicator {
    fn launch(&self, device: i64, stream: i64, args: &OpArgs) -> Result<Box<Work>, String> {
        let op = args.op()?;
        let stream = rt::stream_by_id(device, stream as u64).map_err(|e| e.to_string())?;
        self.0.launch(&stream, op).map(|w| Box::new(Work(w))).map_err(|e| e.to_string())
    }

    fn broken(&self) -> bool {
        self.0.failure().is_some()
    }

    fn abort(&self, why: &str) {
        self.0.abort(why);
    }

    fn transports(&self) -> Vec<String> {
        self.0.transports().into_iter().map(String::from).collect()
    }
}

fn status_of(outcome: Option<Result<(), String>>) -> Status {
    match outcome {
        None => Status::Running,
        Some(Ok(())) => Status::Succeeded,
        Some(Err(_)) => Status::Failed,
    }
}

impl Work {
    fn wait(&self, timeout_ms: i64) -> Status {
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        status_of(self.0.wait(timeout))
    }

    fn status(&self) -> Status {
        status_of(self.0.poll())
    }

    fn error(&self) -> String {
        self.0.poll().and_then(Result::err).unwrap_or_default()
    }

    fn describe(&self) -> String {
        format!("{} #{}", self.0.name, self.0.seq)
    }

    fn share(&self) -> Box<Work> {
        Box::new(Work(self.0.clone()))
    }
}
