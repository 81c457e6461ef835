//! Pinned host memory for `pin_memory()`, cached like PyTorch's `CachingHostAllocator`.
//!
//! Requests are rounded up to a power of two (at least a page) and freed blocks are kept in
//! per-size free lists. A block that an asynchronous copy still reads or writes carries an
//! event on the copy's stream; freed, it is reused only once that event has completed, so a
//! `non_blocking=True` copy never sees its buffer recycled under it.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use openreg_runtime as rt;

use crate::error::Result;
use crate::ffi::ffi::{HostStats, Stat};

struct HostBlock {
    size: usize,
    allocated: bool,
    /// Events of asynchronous copies that use the block.
    events: Vec<rt::Event>,
}

#[derive(Default)]
struct HostCache {
    /// Every block, by address (ordered, to find the block containing a pointer).
    blocks: BTreeMap<usize, HostBlock>,
    /// Free blocks by size.
    free: HashMap<usize, Vec<usize>>,
    /// Freed blocks waiting for their events.
    pending: Vec<usize>,
    stats: HostStats,
}

static CACHE: Mutex<Option<HostCache>> = Mutex::new(None);

fn with_cache<R>(f: impl FnOnce(&mut HostCache) -> R) -> R {
    let mut guard: MutexGuard<'_, Option<HostCache>> = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HostCache::default))
}

fn bump(stat: &mut Stat, amount: i64) {
    stat.current += amount;
    stat.peak = stat.peak.max(stat.current);
    if amount > 0 { stat.allocated += amount } else { stat.freed -= amount }
}

impl HostCache {
    fn process_pending(&mut self) {
        let blocks = &self.blocks;
        let (ready, waiting): (Vec<usize>, Vec<usize>) =
            self.pending.iter().partition(|a| blocks[a].events.iter().all(rt::Event::query));
        self.pending = waiting;
        for addr in ready {
            let block = self.blocks.get_mut(&addr).expect("block exists");
            block.events.clear();
            self.free.entry(block.size).or_default().push(addr);
        }
    }

    // ANCHOR: host_malloc
    fn malloc(&mut self, requested: usize) -> Result<usize> {
        let size = requested.next_power_of_two().max(rt::memory::page_size());
        self.process_pending();
        let addr = match self.free.get_mut(&size).and_then(Vec::pop) {
            Some(addr) => addr,
            None => {
                let addr = rt::host_malloc(size)? as usize;
                self.blocks.insert(addr, HostBlock { size, allocated: false, events: Vec::new() });
                bump(&mut self.stats.allocations, 1);
                bump(&mut self.stats.allocated_bytes, size as i64);
                self.stats.num_host_alloc += 1;
                addr
            }
        };
        self.blocks.get_mut(&addr).expect("block exists").allocated = true;
        bump(&mut self.stats.active_requests, 1);
        bump(&mut self.stats.active_bytes, size as i64);
        Ok(addr)
    }
    // ANCHOR_END: host_malloc

    fn free(&mut self, addr: usize) {
        let Some(block) = self.blocks.get_mut(&addr).filter(|b| b.allocated) else {
            let _ = writeln!(std::io::stderr(), "openreg: free of {addr:#x}, which is not pinned memory in use");
            return;
        };
        block.allocated = false;
        let size = block.size;
        bump(&mut self.stats.active_requests, -1);
        bump(&mut self.stats.active_bytes, -(size as i64));
        if block.events.iter().all(rt::Event::query) {
            block.events.clear();
            self.free.entry(size).or_default().push(addr);
        } else {
            self.pending.push(addr);
        }
    }

    /// The block that contains `ptr` (a tensor may start inside a pinned allocation).
    fn block_of(&mut self, ptr: usize) -> Option<&mut HostBlock> {
        let (&base, block) = self.blocks.range_mut(..=ptr).next_back()?;
        (block.allocated && ptr < base + block.size).then_some(block)
    }

    fn empty(&mut self) {
        self.process_pending();
        for (size, addrs) in self.free.drain() {
            for addr in addrs {
                self.blocks.remove(&addr);
                bump(&mut self.stats.allocations, -1);
                bump(&mut self.stats.allocated_bytes, -(size as i64));
                self.stats.num_host_free += 1;
                if let Err(e) = rt::host_free(addr as *mut u8) {
                    let _ = writeln!(std::io::stderr(), "openreg: releasing pinned memory: {e}");
                }
            }
        }
    }
}

pub(crate) fn host_malloc(size: usize) -> Result<usize> {
    if size == 0 {
        return Ok(0);
    }
    with_cache(|c| c.malloc(size))
}

/// Called from a C++ deleter, which cannot fail: errors are reported, not raised.
pub(crate) fn host_free(ptr: usize) {
    if ptr != 0 {
        with_cache(|c| c.free(ptr));
    }
}

// ANCHOR: record_event
/// Marks the pinned block containing `ptr` as used by the work queued so far on
/// `(device, stream)`. Returns false if `ptr` is not pinned memory of this allocator.
pub(crate) fn record_host_event(ptr: usize, device: i64, stream: i64) -> Result<bool> {
    let stream = rt::stream_by_id(device, stream as u64)?;
    with_cache(|c| match c.block_of(ptr) {
        Some(block) => {
            let event = rt::Event::new(false);
            event.record(&stream)?;
            block.events.push(event);
            Ok(true)
        }
        None => Ok(false),
    })
}
// ANCHOR_END: record_event

/// `torch.accelerator.empty_host_cache()`: cached pinned blocks go back to the system.
pub(crate) fn empty_host_cache() {
    with_cache(HostCache::empty);
}

pub(crate) fn host_stats() -> HostStats {
    with_cache(|c| c.stats)
}

pub(crate) fn reset_host_stats(peak_only: bool) {
    with_cache(|c| {
        let s = &mut c.stats;
        for stat in [&mut s.active_requests, &mut s.active_bytes, &mut s.allocations, &mut s.allocated_bytes] {
            stat.peak = stat.current;
            if !peak_only {
                stat.allocated = 0;
                stat.freed = 0;
            }
        }
        if !peak_only {
            s.num_host_alloc = 0;
            s.num_host_free = 0;
        }
    });
}

pub(crate) fn is_pinned(ptr: usize) -> bool {
    rt::pointer_attributes(ptr as *const u8).memory_type == rt::MemoryType::Host
}

/// The device of a device pointer, or -1.
pub(crate) fn pointer_device(ptr: usize) -> i8 {
    rt::device_of(ptr as *const u8).map_or(-1, |d| d as i8)
}
