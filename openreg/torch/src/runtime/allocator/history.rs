//! The allocator's history, for memory snapshots in the format of CUDA's
//! (`torch.cuda.memory._snapshot()`), which PyTorch's viewer (`torch.cuda._memory_viz`) reads:
//! each block keeps the traceback of its allocation, and each device a trace of allocator
//! events (alloc, free, segment alloc and free, OOM), at most `max_entries` of them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use cxx::SharedPtr;

use crate::ffi::ffi::{self, Traceback};

// SAFETY: a CapturedTraceback is immutable once gathered; torch shares them across threads.
unsafe impl Send for Traceback {}
unsafe impl Sync for Traceback {}

/// Where an allocation or free came from, symbolized only when a snapshot is taken.
#[derive(Clone)]
pub(crate) struct Context(SharedPtr<Traceback>);

// ANCHOR: levels
/// What `_record_memory_history(enabled, context, stacks, max_entries)` asked for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum Level {
    /// Nothing recorded.
    Off = 0,
    /// Tracebacks of the blocks allocated now ("state").
    State = 1,
    /// Also the tracebacks of trace entries for allocations ("alloc"), or for frees too ("all").
    Alloc = 2,
    All = 3,
}

static ENABLED: AtomicU8 = AtomicU8::new(0); // Off, State ("state") or All ("all")
static CONTEXT: AtomicU8 = AtomicU8::new(0);
static CPP: AtomicBool = AtomicBool::new(false);
static MAX_ENTRIES: AtomicUsize = AtomicUsize::new(usize::MAX);
// ANCHOR_END: levels

fn level(from: u8) -> Level {
    match from {
        1 => Level::State,
        2 => Level::Alloc,
        3 => Level::All,
        _ => Level::Off,
    }
}

/// Starts, changes or stops recording (`enabled` Off stops). `clear` drops the trace so far.
pub fn record_memory_history(enabled: Level, context: Level, cpp: bool, max_entries: usize, clear: bool) {
    ENABLED.store(enabled as u8, Ordering::Relaxed);
    CONTEXT.store(if enabled == Level::Off { 0 } else { context as u8 }, Ordering::Relaxed);
    CPP.store(cpp, Ordering::Relaxed);
    MAX_ENTRIES.store(max_entries.max(1), Ordering::Relaxed);
    for device in 0..openreg_runtime::DEVICE_COUNT {
        super::with_cache(device, |c| {
            if clear || enabled == Level::Off {
                c.trace.clear();
            }
            if enabled == Level::Off {
                for block in c.blocks.values_mut() {
                    block.context = None;
                }
            }
        });
    }
}

pub(crate) fn tracing() -> bool {
    ENABLED.load(Ordering::Relaxed) == Level::All as u8
}

// ANCHOR: gather
/// The caller's traceback if recording asks for one: for an allocation from "state" on, for a
/// free only at "all". Called before the allocator takes its lock: gathering Python frames
/// takes the GIL, which another thread may hold while it waits for the allocator.
pub(crate) fn gather(for_free: bool) -> Option<Context> {
    let context = level(CONTEXT.load(Ordering::Relaxed));
    let wanted = if for_free { context == Level::All } else { context >= Level::State };
    wanted.then(|| Context(ffi::gather_traceback(true, CPP.load(Ordering::Relaxed))))
}
// ANCHOR_END: gather

/// Whether trace entries of this kind carry the traceback (allocations from "alloc" on).
fn entry_context(context: &Option<Context>, for_free: bool) -> Option<Context> {
    let wanted = level(CONTEXT.load(Ordering::Relaxed));
    let keep = if for_free { wanted == Level::All } else { wanted >= Level::Alloc };
    if keep { context.clone() } else { None }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    Oom,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
        }
    }
}

pub(crate) struct TraceEntry {
    action: Action,
    addr: usize,
    size: usize,
    owner: u64,
    time_us: i64,
    context: Option<Context>,
    device_free: usize,
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Appends to a device's trace if history is on, dropping the oldest entry when full.
pub(crate) fn record(
    trace: &mut VecDeque<TraceEntry>,
    action: Action,
    addr: usize,
    size: usize,
    owner: u64,
    context: &Option<Context>,
    device_free: usize,
) {
    if !tracing() {
        return;
    }
    let for_free = matches!(action, Action::FreeRequested | Action::FreeCompleted | Action::SegmentFree);
    if trace.len() >= MAX_ENTRIES.load(Ordering::Relaxed) {
        trace.pop_front();
    }
    trace.push_back(TraceEntry {
        action,
        addr,
        size,
        owner,
        time_us: now_us(),
        context: entry_context(context, for_free),
        device_free,
    });
}

// ANCHOR: snapshot_types
/// A snapshot as plain data; `torch_openreg._C` turns it into CUDA's dictionaries.
pub struct Snapshot {
    pub segments: Vec<SegmentInfo>,
    /// One list per device.
    pub traces: Vec<Vec<TraceInfo>>,
    /// Symbolized tracebacks; `frames` fields index into it.
    pub tracebacks: Vec<Vec<Frame>>,
}

pub struct SegmentInfo {
    pub device: usize,
    pub address: usize,
    pub total_size: usize,
    pub stream: u64,
    /// Nonzero for a pool's segment: `segment_pool_id` is (0, pool).
    pub pool: u64,
    pub small: bool,
    pub frames: Option<usize>,
    pub blocks: Vec<BlockInfo>,
}

pub struct BlockInfo {
    pub address: usize,
    pub size: usize,
    pub requested_size: usize,
    /// "active_allocated", "active_pending_free" or "inactive".
    pub state: &'static str,
    pub frames: Option<usize>,
}

pub struct TraceInfo {
    pub action: &'static str,
    pub addr: usize,
    pub size: usize,
    pub stream: u64,
    pub pool: u64,
    pub time_us: i64,
    pub frames: Option<usize>,
    pub device_free: usize,
}

pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: i64,
}
// ANCHOR_END: snapshot_types

/// Numbers each distinct traceback once, for one symbolization pass.
#[derive(Default)]
pub(crate) struct Contexts {
    index: HashMap<usize, usize>,
    list: Vec<Context>,
}

impl Contexts {
    pub(crate) fn add(&mut self, context: &Option<Context>) -> Option<usize> {
        let c = context.as_ref()?;
        let key = c.0.as_ref().map_or(0, |t| t as *const Traceback as usize);
        Some(*self.index.entry(key).or_insert_with(|| {
            self.list.push(c.clone());
            self.list.len() - 1
        }))
    }

    /// Symbolizes every traceback (without the allocator's lock: Python frames take the GIL).
    pub(crate) fn symbolize(self) -> Vec<Vec<Frame>> {
        let mut tracebacks: Vec<Vec<Frame>> = (0..self.list.len()).map(|_| Vec::new()).collect();
        if self.list.is_empty() {
            return tracebacks;
        }
        let mut symbolizer = ffi::new_symbolizer();
        for c in &self.list {
            symbolizer.pin_mut().add(&c.0);
        }
        for f in symbolizer.pin_mut().symbolize() {
            tracebacks[f.traceback].push(Frame { name: f.name, filename: f.filename, line: f.line });
        }
        tracebacks
    }
}

/// The trace entries of a device, numbered into `contexts`; only a pool's when `pool` is given.
pub(crate) fn trace_infos(trace: &VecDeque<TraceEntry>, pool: Option<u64>, contexts: &mut Contexts) -> Vec<TraceInfo> {
    trace
        .iter()
        .filter(|e| pool.is_none_or(|p| e.owner == p))
        .map(|e| {
            let (stream, pool) = split_owner(e.owner);
            TraceInfo {
                action: e.action.name(),
                addr: e.addr,
                size: e.size,
                stream,
                pool,
                time_us: e.time_us,
                frames: contexts.add(&e.context),
                device_free: e.device_free,
            }
        })
        .collect()
}

/// A free-list owner as (stream, pool): a pool's blocks report stream 0.
pub(crate) fn split_owner(owner: u64) -> (u64, u64) {
    if owner >= super::pools::POOL { (0, owner & !super::pools::POOL) } else { (owner, 0) }
}
