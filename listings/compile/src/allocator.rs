//! The caching allocator. Getting device memory from the driver is slow (here a memory file
//! and two mappings; on CUDA, `cudaMalloc`, which also synchronizes the device), and a
//! program frees and allocates the same sizes over and over. So a freed block is kept, on the
//! stream it was allocated on, and the next request of its size on that stream takes it back.
//!
//! Reuse is safe on the block's own stream: work queued there before the free runs before
//! work queued after the new allocation. Another stream's work is not ordered with it, so a
//! block that other streams used (`record_stream`) waits for their work first.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::device::DEVICE_COUNT;
use crate::event::{new_event, Event};
use crate::memory;
use crate::stream::synchronize_device;

/// Sizes are rounded up to a multiple of this, so that near sizes share blocks.
const ROUND: usize = 512;

struct Block {
    size: usize,
    device: i8,
    stream: i64,
    other_streams: Vec<i64>, // from record_stream
}

/// Current and peak of a quantity, like PyTorch's `Stat`.
#[derive(Default, Clone, Copy)]
pub struct Stat {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64, // total ever added
    pub freed: i64,     // total ever removed
}

impl Stat {
    fn add(&mut self, n: i64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
        self.allocated += n;
    }
    fn remove(&mut self, n: i64) {
        self.current -= n;
        self.freed += n;
    }
}

#[derive(Default, Clone, Copy)]
pub struct Stats {
    pub allocated_bytes: Stat,
    pub reserved_bytes: Stat,
    pub allocations: Stat, // blocks in use
    pub segments: Stat,    // blocks got from the driver
}

#[derive(Default)]
struct Pool {
    in_use: HashMap<usize, Block>,
    /// Freed blocks per (device, stream), by size.
    cached: HashMap<(i8, i64), BTreeMap<usize, Vec<usize>>>,
    /// Freed blocks waiting for other streams' work, with the events that mark it.
    waiting: Vec<(usize, Block, Vec<Box<Event>>)>,
    stats: [Stats; DEVICE_COUNT as usize],
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn pool() -> MutexGuard<'static, Option<Pool>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    fn cache(&mut self, ptr: usize, block: Block) {
        self.cached.entry((block.device, block.stream)).or_default().entry(block.size).or_default().push(ptr);
    }

    /// Blocks whose other streams have finished with them become reusable.
    fn collect_waiting(&mut self) {
        let (done, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|(_, _, events)| events.iter().all(|e| e.query()));
        self.waiting = waiting;
        for (ptr, block, _) in done {
            self.cache(ptr, block);
        }
    }

    /// A cached block of `size` bytes on this stream (one at most twice as large).
    fn reuse(&mut self, size: usize, device: i8, stream: i64) -> Option<(usize, usize)> {
        let sizes = self.cached.get_mut(&(device, stream))?;
        let (&found, ptrs) = sizes.range_mut(size..=2 * size).next()?;
        let ptr = ptrs.pop()?;
        if ptrs.is_empty() {
            sizes.remove(&found);
        }
        Some((ptr, found))
    }

    /// Gives every cached block of `device` back to the driver.
    fn release(&mut self, device: i8) {
        for ((d, _), sizes) in self.cached.iter_mut().filter(|((d, _), _)| *d == device) {
            for (size, ptrs) in std::mem::take(sizes) {
                for ptr in ptrs {
                    memory::free(ptr);
                    self.stats[*d as usize].reserved_bytes.remove(size as i64);
                    self.stats[*d as usize].segments.remove(1);
                }
            }
        }
    }
}

// ANCHOR: malloc
/// `size` bytes on `device`, for use on stream `stream` (the current one, as in CUDA).
pub fn malloc(size: usize, device: i8, stream: i64) -> Result<usize, String> {
    if size == 0 {
        return Ok(0);
    }
    let size = size.next_multiple_of(ROUND);
    let mut guard = pool();
    let pool = guard.get_or_insert_with(Pool::default);
    pool.collect_waiting();
    let ptr = match pool.reuse(size, device, stream) {
        Some((ptr, found)) => {
            pool.in_use.insert(ptr, Block { size: found, device, stream, other_streams: Vec::new() });
            pool.stats[device as usize].allocated_bytes.add(found as i64);
            ptr
        }
        None => {
            // New memory from the driver. When there is none, give back what the cache holds
            // (after the device's queued work, which may still use it) and try once more.
            let ptr = match memory::malloc(size, device) {
                Ok(ptr) => ptr,
                Err(_) => {
                    drop(guard);
                    synchronize_device(device)?;
                    guard = self::pool();
                    let pool = guard.as_mut().expect("created above");
                    pool.release(device);
                    memory::malloc(size, device)?
                }
            };
            let pool = guard.as_mut().expect("created above");
            pool.in_use.insert(ptr, Block { size, device, stream, other_streams: Vec::new() });
            let stats = &mut pool.stats[device as usize];
            stats.reserved_bytes.add(size as i64);
            stats.segments.add(1);
            stats.allocated_bytes.add(size as i64);
            ptr
        }
    };
    guard.as_mut().expect("created above").stats[device as usize].allocations.add(1);
    Ok(ptr)
}
// ANCHOR_END: malloc

// ANCHOR: free
/// Called from a C++ deleter: never fails, never panics.
pub fn free(ptr: usize) {
    let mut guard = pool();
    let Some(pool) = guard.as_mut() else { return };
    let Some(block) = pool.in_use.remove(&ptr) else { return };
    let stats = &mut pool.stats[block.device as usize];
    stats.allocated_bytes.remove(block.size as i64);
    stats.allocations.remove(1);
    if block.other_streams.is_empty() {
        pool.cache(ptr, block);
        return;
    }
    // An event on each other stream marks the end of the work queued there so far.
    let events = block
        .other_streams
        .iter()
        .filter_map(|&s| {
            let event = new_event();
            event.record(block.device, s).ok().map(|_| event)
        })
        .collect();
    pool.waiting.push((ptr, block, events));
}

/// The block at `ptr` is also used by stream `stream`: it waits for that stream's work
/// before it is reused.
pub fn record_stream(ptr: usize, stream: i64) {
    if let Some(block) = pool().as_mut().and_then(|p| p.in_use.get_mut(&ptr)) {
        if stream != block.stream && !block.other_streams.contains(&stream) {
            block.other_streams.push(stream);
        }
    }
}
// ANCHOR_END: free

// ANCHOR: empty_cache
/// Gives the cached blocks of `device` back to the driver, after the device's queued work.
pub fn empty_cache(device: i8) -> Result<(), String> {
    synchronize_device(device)?;
    if let Some(pool) = pool().as_mut() {
        pool.collect_waiting();
        pool.release(device);
    }
    Ok(())
}

pub fn stats(device: i8) -> Stats {
    pool().as_ref().map_or_else(Stats::default, |p| p.stats[device as usize])
}

pub fn reset_peak_stats(device: i8) {
    if let Some(pool) = pool().as_mut() {
        let stats = &mut pool.stats[device as usize];
        for stat in [&mut stats.allocated_bytes, &mut stats.reserved_bytes, &mut stats.allocations, &mut stats.segments] {
            stat.peak = stat.current;
        }
    }
}

pub fn reset_accumulated_stats(device: i8) {
    if let Some(pool) = pool().as_mut() {
        let stats = &mut pool.stats[device as usize];
        for stat in [&mut stats.allocated_bytes, &mut stats.reserved_bytes, &mut stats.allocations, &mut stats.segments] {
            stat.allocated = 0;
            stat.freed = 0;
        }
    }
}
// ANCHOR_END: empty_cache
