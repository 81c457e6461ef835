//! The caching device allocator behind PyTorch's `c10::DeviceAllocator`.
//!
//! Asking the runtime for memory is slow on a real device (a driver call, often a device
//! synchronisation), so, like CUDA's caching allocator, this one takes memory from the
//! runtime in **segments**, hands out **blocks** carved from them, and keeps freed blocks for
//! reuse:
//!
//! * requests are rounded up to 512 bytes; up to 1 MiB they come from the *small pool*
//!   (2 MiB segments), above it from the *large pool* (20 MiB segments, or the request
//!   rounded up to 2 MiB when it is 10 MiB or more);
//! * a block is split when the rest is worth keeping, and freed neighbours merge again;
//! * a freed small block is first *parked*: the next request of its size on its stream takes
//!   it back without a split or a merge (operators free and allocate the same sizes over and
//!   over); parked blocks merge only when there are too many, when a request finds no other
//!   fit, and before statistics or `empty_cache`;
//! * a block is reused only by the stream it was allocated on (work on one stream is
//!   ordered, so that is safe); if other streams used it (`record_stream`), it returns to the
//!   pool only once their work, queued before the free, has completed;
//! * `empty_cache` gives wholly free segments back to the runtime.
//!
//! It also keeps the statistics behind `torch.accelerator.memory_allocated()` and friends.
//! Its settings come from `PYTORCH_ALLOC_CONF` (`settings.rs`), its memory pools are in
//! `pools.rs`, and its history for memory snapshots in `history.rs`.

pub(crate) mod history;
pub(crate) mod pools;
pub(crate) mod settings;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use openreg_runtime as rt;

use crate::error::{Failure, Result};
use crate::ffi::ffi::{DeviceStats, MemoryInfo, MemoryReport, Stat};

use history::{Action, Context, TraceEntry};
use pools::POOL;
use settings::Settings;

// ANCHOR: sizes
const ALIGNMENT: usize = 512;
/// Blocks up to this size live in the small pool.
const SMALL_SIZE: usize = 1 << 20;
const SMALL_SEGMENT: usize = 2 << 20;
const LARGE_SEGMENT: usize = 20 << 20;
/// From this size on, a request gets a segment of its own (rounded up to 2 MiB).
const MIN_LARGE_ALLOC: usize = 10 << 20;
const ROUND_LARGE: usize = 2 << 20;
// ANCHOR_END: sizes

const SMALL: usize = 1;
const LARGE: usize = 2;

// ANCHOR: hasher
/// Hashes block addresses with one multiplication. The standard library's SipHash resists
/// crafted keys, which addresses are not, and costs ~20 ns per lookup: a dozen lookups per
/// allocation and free were a third of a small operator's overhead.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64)
    }
    fn write_u64(&mut self, n: u64) {
        // Addresses are multiples of 512: fold the well-mixed high bits into the low ones,
        // which pick the bucket.
        let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type AddressMap<V> = HashMap<usize, V, BuildHasherDefault<AddressHasher>>;
// ANCHOR_END: hasher

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

fn pool_of(size: usize) -> usize {
    if size <= SMALL_SIZE { SMALL } else { LARGE }
}

// ANCHOR: block
/// A range of a segment, allocated or free. Blocks of a segment form a list in address
/// order (`prev`/`next`), so a freed block can merge with free neighbours.
struct Block {
    segment: usize,
    /// SMALL or LARGE: the pool of the segment, whatever the block's size.
    pool: usize,
    size: usize,
    /// What the caller asked for (0 when free).
    requested: usize,
    /// The stream it was allocated on; it is reused only on that stream.
    stream: u64,
    allocated: bool,
    /// Freed, and waiting unmerged in `DeviceCache::parked`.
    parked: bool,
    prev: Option<usize>,
    next: Option<usize>,
    /// Other streams that used it (`record_stream`).
    stream_uses: Vec<u64>,
    /// After a free: events on those streams that must complete before reuse.
    pending: Vec<rt::Event>,
    /// Where it was allocated, while memory history is recorded.
    context: Option<Context>,
}

/// One device's cache.
struct DeviceCache {
    device: usize,
    /// Every block, by address.
    blocks: AddressMap<Block>,
    /// Free blocks of each pool, ordered by (stream, size, address): best fit per stream.
    free: [BTreeSet<(u64, usize, usize)>; 3],
    /// Freed blocks waiting for other streams' work.
    pending: Vec<usize>,
    /// Freed small blocks not yet merged, oldest first: (stream, size, address).
    parked: Vec<(u64, usize, usize)>,
    /// Segment base -> size.
    segments: AddressMap<usize>,
    stats: DeviceStats,
    settings: Settings,
    /// Allocator events, while memory history is recorded (`history.rs`).
    trace: VecDeque<TraceEntry>,
    /// Where each segment was first needed, while memory history is recorded.
    segment_contexts: AddressMap<Context>,
    /// Pools nobody refers to any more: their segments go back to the device once free.
    released_pools: HashSet<u64>,
}
// ANCHOR_END: block

static CACHES: [Mutex<Option<DeviceCache>>; rt::DEVICE_COUNT] = [const { Mutex::new(None) }; rt::DEVICE_COUNT];

/// Runs `f` on `device`'s cache under its lock.
fn with_cache<R>(device: usize, f: impl FnOnce(&mut DeviceCache) -> R) -> R {
    let mut guard: MutexGuard<'_, Option<DeviceCache>> = CACHES[device].lock().unwrap_or_else(|e| e.into_inner());
    let cache = guard.get_or_insert_with(|| DeviceCache {
        device,
        blocks: AddressMap::default(),
        free: Default::default(),
        pending: Vec::new(),
        parked: Vec::new(),
        segments: AddressMap::default(),
        stats: DeviceStats::default(),
        settings: settings::current(),
        trace: VecDeque::new(),
        segment_contexts: AddressMap::default(),
        released_pools: HashSet::new(),
    });
    f(cache)
}

/// New settings for every device's cache.
fn apply_settings(settings: Settings) {
    for device in 0..rt::DEVICE_COUNT {
        with_cache(device, |c| {
            c.settings = settings;
            while c.parked.len() > settings.parked_blocks {
                let (_, _, oldest) = c.parked.remove(0);
                c.unpark(oldest);
            }
        });
    }
}

// ANCHOR: stat
impl Stat {
    fn increase(&mut self, amount: i64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    fn decrease(&mut self, amount: i64) {
        self.current -= amount;
        self.freed += amount;
    }
}

/// Updates the aggregate entry and the entry of the block's pool.
fn update(stats: &mut [Stat; 3], pool: usize, amount: i64) {
    for i in [0, pool] {
        if amount >= 0 { stats[i].increase(amount) } else { stats[i].decrease(-amount) }
    }
}
// ANCHOR_END: stat

impl DeviceCache {
    fn free_key(&self, addr: usize) -> (u64, usize, usize) {
        let b = &self.blocks[&addr];
        (b.stream, b.size, addr)
    }

    fn insert_free(&mut self, addr: usize) {
        let key = self.free_key(addr);
        self.free[self.blocks[&addr].pool].insert(key);
    }

    fn remove_free(&mut self, addr: usize) {
        let key = self.free_key(addr);
        self.free[self.blocks[&addr].pool].remove(&key);
    }

    // ANCHOR: malloc
    fn malloc(&mut self, requested: usize, stream: u64, context: Option<Context>) -> Result<usize> {
        let size = self.settings.round_size(requested);
        let pool = pool_of(size);
        self.process_pending();
        let addr = match self.parked.iter().rposition(|&(s, n, _)| s == stream && n == size) {
            Some(i) => self.parked.remove(i).2,
            None => {
                let mut found = self.best_fit(pool, stream, size);
                if found.is_none() && !self.parked.is_empty() {
                    self.unpark_all(); // merged, they may make room
                    found = self.best_fit(pool, stream, size);
                }
                let addr = match found {
                    Some(addr) => addr,
                    None => self.new_segment(requested, size, stream, &context)?,
                };
                self.split(addr, size);
                addr
            }
        };
        let block = self.blocks.get_mut(&addr).expect("block exists");
        block.allocated = true;
        block.parked = false;
        block.requested = requested;
        let (block_size, pool) = (block.size as i64, block.pool);
        history::record(&mut self.trace, Action::Alloc, addr, block_size as usize, stream, &context, 0);
        self.blocks.get_mut(&addr).expect("block exists").context = context;
        let s = &mut self.stats;
        update(&mut s.allocation, pool, 1);
        update(&mut s.active, pool, 1);
        update(&mut s.allocated_bytes, pool, block_size);
        update(&mut s.active_bytes, pool, block_size);
        update(&mut s.requested_bytes, pool, requested as i64);
        Ok(addr)
    }

    /// Takes the smallest free block of `stream` with at least `size` bytes out of `pool`. A
    /// block of `max_split_size` or more is not split: it serves only a request that fills it
    /// to within `max_non_split_rounding`.
    fn best_fit(&mut self, pool: usize, stream: u64, size: usize) -> Option<usize> {
        let key = self.free[pool].range((stream, size, 0)..(stream + 1, 0, 0)).next().copied()?;
        let (max_split, rounding) = (self.settings.max_split_size, self.settings.max_non_split_rounding);
        if key.1 >= max_split && (size < max_split || key.1 - size >= rounding) {
            return None;
        }
        self.free[pool].remove(&key);
        Some(key.2)
    }
    // ANCHOR_END: malloc

    /// Takes a new segment from the runtime; on failure, releases the cache and retries.
    fn new_segment(&mut self, requested: usize, size: usize, stream: u64, context: &Option<Context>) -> Result<usize> {
        let preferred = match pool_of(size) {
            SMALL => SMALL_SEGMENT,
            _ if size < MIN_LARGE_ALLOC && size < self.settings.max_split_size => {
                self.settings.large_segment_size.max(size)
            }
            _ => round_up(size, ROUND_LARGE),
        };
        let device = self.device as i64;
        self.collect_garbage(preferred);
        let attempt = |len: usize| rt::malloc(device, len).map(|p| (p as usize, len));
        let (base, len) = match attempt(preferred) {
            Ok(got) => got,
            Err(rt::Error::OutOfMemory { .. }) => {
                self.stats.num_alloc_retries += 1;
                // Releasing waits for the device, which a graph capture forbids: then the
                // request fails at once, and the capture stays valid.
                if !rt::graph::any_capturing() {
                    self.release_free_segments();
                }
                // A smaller segment, just the request, may still fit.
                match attempt(preferred).or_else(|_| attempt(size)) {
                    Ok(got) => got,
                    Err(rt::Error::OutOfMemory { capacity, .. }) => {
                        self.stats.num_ooms += 1;
                        let free = rt::memory_info(device).map_or(0, |(free, _)| free);
                        history::record(&mut self.trace, Action::Oom, 0, requested, stream, context, free);
                        return Err(self.out_of_memory(requested, capacity));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let pool = pool_of(size);
        self.segments.insert(base, len);
        self.blocks.insert(base, Block {
            segment: base,
            pool,
            size: len,
            requested: 0,
            stream,
            allocated: false,
            parked: false,
            prev: None,
            next: None,
            stream_uses: Vec::new(),
            pending: Vec::new(),
            context: None,
        });
        update(&mut self.stats.segment, pool, 1);
        update(&mut self.stats.reserved_bytes, pool, len as i64);
        self.stats.num_device_alloc += 1;
        history::record(&mut self.trace, Action::SegmentAlloc, base, len, stream, context, 0);
        if let Some(c) = context {
            self.segment_contexts.insert(base, c.clone());
        }
        Ok(base)
    }

    // ANCHOR: garbage_collection
    /// `garbage_collection_threshold`: before a new segment would take the reserved memory
    /// past that fraction of the device, wholly free segments go back to the device.
    fn collect_garbage(&mut self, wanted: usize) {
        let threshold = self.settings.garbage_collection_threshold;
        if threshold <= 0.0 || rt::graph::any_capturing() {
            return;
        }
        let Ok((_, capacity)) = rt::memory_info(self.device as i64) else { return };
        let reserved = self.stats.reserved_bytes[0].current as usize;
        if (reserved + wanted) as f64 > threshold * capacity as f64 {
            self.release_free_segments();
        }
    }
    // ANCHOR_END: garbage_collection

    fn out_of_memory(&self, requested: usize, capacity: usize) -> Failure {
        let human = rt::error::human;
        Failure::out_of_memory(format!(
            "openreg:{} out of memory: tried to allocate {}; {} allocated and {} reserved by \
             PyTorch, of a capacity of {}. torch.accelerator.empty_cache() releases cached \
             memory; OPENREG_DEVICE_MEMORY sets the capacity. To see what holds the memory, \
             call torch.openreg.memory._record_memory_history() before the failing code and \
             torch.openreg.memory._dump_snapshot(path) after it, and open the file with \
             torch.cuda._memory_viz.",
            self.device,
            human(requested),
            human(self.stats.allocated_bytes[0].current as usize),
            human(self.stats.reserved_bytes[0].current as usize),
            human(capacity)
        ))
    }

    /// Cuts `addr` down to `size` if the rest is worth keeping; the rest becomes a free block.
    fn split(&mut self, addr: usize, size: usize) {
        let block = &self.blocks[&addr];
        let rest = block.size - size;
        let worth = if block.pool == SMALL {
            rest >= ALIGNMENT
        } else {
            rest > SMALL_SIZE && block.size < self.settings.max_split_size
        };
        if !worth {
            return;
        }
        let (segment, pool, stream, next) = (block.segment, block.pool, block.stream, block.next);
        let rest_addr = addr + size;
        self.blocks.insert(rest_addr, Block {
            segment,
            pool,
            size: rest,
            requested: 0,
            stream,
            allocated: false,
            parked: false,
            prev: Some(addr),
            next,
            stream_uses: Vec::new(),
            pending: Vec::new(),
            context: None,
        });
        if let Some(n) = next {
            self.blocks.get_mut(&n).expect("neighbour exists").prev = Some(rest_addr);
        }
        let block = self.blocks.get_mut(&addr).expect("block exists");
        block.size = size;
        block.next = Some(rest_addr);
        self.insert_free(rest_addr);
    }

    // ANCHOR: free
    fn free(&mut self, addr: usize, context: Option<Context>) {
        let Some(block) = self.blocks.get_mut(&addr).filter(|b| b.allocated) else {
            let _ = writeln!(std::io::stderr(), "openreg: free of {addr:#x}, which is not an allocated block");
            return;
        };
        block.allocated = false;
        block.context = None;
        let (size, requested, pool, owner) = (block.size as i64, block.requested as i64, block.pool, block.stream);
        block.requested = 0;
        // Other streams may still be using the memory: mark where their queues are now, and
        // reuse the block only once they got there.
        for stream in std::mem::take(&mut block.stream_uses) {
            if let Ok(s) = rt::stream_by_id(self.device as i64, stream) {
                let event = rt::Event::new(false);
                if event.record(&s).is_ok() {
                    block.pending.push(event);
                }
            }
        }
        let s = &mut self.stats;
        update(&mut s.allocation, pool, -1);
        update(&mut s.allocated_bytes, pool, -size);
        update(&mut s.requested_bytes, pool, -requested);
        history::record(&mut self.trace, Action::FreeRequested, addr, size as usize, owner, &context, 0);
        if !self.blocks[&addr].pending.is_empty() {
            self.pending.push(addr);
            return;
        }
        history::record(&mut self.trace, Action::FreeCompleted, addr, size as usize, owner, &context, 0);
        if self.released_pools.contains(&owner) {
            let segment = self.blocks[&addr].segment;
            self.release_block(addr);
            self.release_segment_if_free(segment);
        } else if pool == SMALL && self.settings.parked_blocks > 0 {
            self.park(addr);
        } else {
            self.release_block(addr);
        }
    }
    // ANCHOR_END: free

    // ANCHOR: park
    /// Keeps a freed small block aside, unmerged, for the next request of its size.
    fn park(&mut self, addr: usize) {
        let block = self.blocks.get_mut(&addr).expect("block exists");
        block.parked = true;
        let (pool, size, stream) = (block.pool, block.size, block.stream);
        update(&mut self.stats.active, pool, -1);
        update(&mut self.stats.active_bytes, pool, -(size as i64));
        self.parked.push((stream, size, addr));
        if self.parked.len() > self.settings.parked_blocks {
            let (_, _, oldest) = self.parked.remove(0);
            self.unpark(oldest);
        }
    }

    fn unpark(&mut self, addr: usize) {
        self.blocks.get_mut(&addr).expect("block exists").parked = false;
        self.merge_into_pool(addr);
    }

    fn unpark_all(&mut self) {
        for (_, _, addr) in std::mem::take(&mut self.parked) {
            self.unpark(addr);
        }
    }
    // ANCHOR_END: park

    /// Returns a block to its pool, merged with free neighbours.
    fn release_block(&mut self, addr: usize) {
        let (pool, size) = (self.blocks[&addr].pool, self.blocks[&addr].size as i64);
        update(&mut self.stats.active, pool, -1);
        update(&mut self.stats.active_bytes, pool, -size);
        self.merge_into_pool(addr);
    }

    fn merge_into_pool(&mut self, mut addr: usize) {
        let is_free = |c: &DeviceCache, a: usize| {
            let b = &c.blocks[&a];
            !b.allocated && !b.parked && b.pending.is_empty()
        };
        if let Some(prev) = self.blocks[&addr].prev.filter(|&p| is_free(self, p)) {
            self.merge(prev, addr);
            addr = prev;
        }
        if let Some(next) = self.blocks[&addr].next.filter(|&n| is_free(self, n)) {
            self.merge(addr, next);
        }
        self.insert_free(addr);
    }

    /// Merges the block `right` into `left`, its predecessor; both leave the free sets.
    fn merge(&mut self, left: usize, right: usize) {
        self.remove_free(left);
        self.remove_free(right);
        let gone = self.blocks.remove(&right).expect("right block exists");
        if let Some(n) = gone.next {
            self.blocks.get_mut(&n).expect("neighbour exists").prev = Some(left);
        }
        let l = self.blocks.get_mut(&left).expect("left block exists");
        l.size += gone.size;
        l.next = gone.next;
    }

    /// Blocks whose other streams have caught up go back to their pools.
    fn process_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let ready: Vec<usize> = self
            .pending
            .iter()
            .copied()
            .filter(|a| self.blocks[a].pending.iter().all(rt::Event::query))
            .collect();
        for addr in ready {
            self.pending.retain(|&a| a != addr);
            let block = self.blocks.get_mut(&addr).expect("block exists");
            block.pending.clear();
            let (size, owner) = (block.size, block.stream);
            history::record(&mut self.trace, Action::FreeCompleted, addr, size, owner, &None, 0);
            self.release_block(addr);
        }
    }

    // ANCHOR: empty_cache
    /// Gives every wholly free segment back to the runtime.
    fn release_free_segments(&mut self) {
        // Queued kernels may still write to blocks freed since they were launched: wait for
        // the device before its memory can go to someone else.
        let _ = rt::synchronize_device(self.device as i64);
        self.process_pending();
        self.unpark_all();
        // A live pool keeps its segments: a graph's replay writes where its capture's freed
        // blocks were. They go when the pool is released.
        let live_pool = |owner: u64| owner >= POOL && !self.released_pools.contains(&owner);
        let whole: Vec<(usize, usize)> = self
            .segments
            .iter()
            .filter(|&(base, &len)| {
                let b = &self.blocks[base];
                b.size == len && !b.allocated && b.pending.is_empty() && !live_pool(b.stream)
            })
            .map(|(&base, &len)| (base, len))
            .collect();
        for (base, _) in whole {
            self.free_segment(base);
        }
        let _ = rt::trim(self.device as i64);
    }
    // ANCHOR_END: empty_cache

    /// Gives a wholly free segment back to the runtime.
    fn free_segment(&mut self, base: usize) {
        let len = self.segments[&base];
        self.remove_free(base);
        let block = self.blocks.remove(&base).expect("segment block exists");
        self.segments.remove(&base);
        let context = self.segment_contexts.remove(&base);
        update(&mut self.stats.segment, block.pool, -1);
        update(&mut self.stats.reserved_bytes, block.pool, -(len as i64));
        self.stats.num_device_free += 1;
        history::record(&mut self.trace, Action::SegmentFree, base, len, block.stream, &context, 0);
        if let Err(e) = rt::free(base as *mut u8) {
            let _ = writeln!(std::io::stderr(), "openreg: releasing a segment: {e}");
        }
    }

    /// Frees `segment` if it is one free block of a released pool.
    fn release_segment_if_free(&mut self, segment: usize) {
        let Some(&len) = self.segments.get(&segment) else { return };
        let b = &self.blocks[&segment];
        if b.size == len && !b.allocated && !b.parked && b.pending.is_empty() {
            // Queued kernels may still write to it (as in release_free_segments).
            let _ = rt::synchronize_device(self.device as i64);
            self.free_segment(segment);
        }
    }

    // ANCHOR: release_pool
    /// The last reference to a pool is gone: its free segments go back to the device now,
    /// the others as their last block is freed.
    fn release_pool(&mut self, owner: u64) {
        self.released_pools.insert(owner);
        self.unpark_all();
        let segments: Vec<usize> =
            self.segments.keys().copied().filter(|base| self.blocks[base].stream == owner).collect();
        for base in segments {
            self.release_segment_if_free(base);
        }
        if !self.segments.keys().any(|base| self.blocks[base].stream == owner) {
            self.released_pools.remove(&owner);
        }
    }
    // ANCHOR_END: release_pool

    /// Bytes and blocks of one owner (a pool's, for `MemPool.memory_stats()`).
    fn owner_stats(&mut self, owner: u64) -> PoolStats {
        self.unpark_all();
        let mut s = PoolStats::default();
        for (&base, &len) in &self.segments {
            if self.blocks[&base].stream != owner {
                continue;
            }
            s.segments += 1;
            s.reserved_bytes += len;
            let mut at = Some(base);
            while let Some(addr) = at {
                let b = &self.blocks[&addr];
                if b.allocated {
                    s.allocated_blocks += 1;
                    s.allocated_bytes += b.size;
                    s.requested_bytes += b.requested;
                }
                at = b.next;
            }
        }
        s
    }

    /// The segments (of one owner, if given) as snapshot data, tracebacks numbered into `contexts`.
    fn segment_infos(&self, owner: Option<u64>, contexts: &mut history::Contexts) -> Vec<history::SegmentInfo> {
        let mut bases: Vec<usize> = self
            .segments
            .keys()
            .copied()
            .filter(|base| owner.is_none_or(|o| self.blocks[base].stream == o))
            .collect();
        bases.sort_unstable();
        bases
            .into_iter()
            .map(|base| {
                let first = &self.blocks[&base];
                let (stream, pool) = history::split_owner(first.stream);
                let mut blocks = Vec::new();
                let mut at = Some(base);
                while let Some(addr) = at {
                    let b = &self.blocks[&addr];
                    let state = if b.allocated {
                        "active_allocated"
                    } else if !b.pending.is_empty() {
                        "active_pending_free"
                    } else {
                        "inactive"
                    };
                    blocks.push(history::BlockInfo {
                        address: addr,
                        size: b.size,
                        requested_size: b.requested,
                        state,
                        frames: contexts.add(&b.context),
                    });
                    at = b.next;
                }
                history::SegmentInfo {
                    device: self.device,
                    address: base,
                    total_size: self.segments[&base],
                    stream,
                    pool,
                    small: first.pool == SMALL,
                    frames: contexts.add(&self.segment_contexts.get(&base).cloned()),
                    blocks,
                }
            })
            .collect()
    }

    /// Statistics, with the inactive split blocks counted now (parked ones merged first).
    fn stats(&mut self) -> DeviceStats {
        self.unpark_all();
        let mut s = self.stats;
        for pool in [SMALL, LARGE] {
            for &(_, size, addr) in &self.free[pool] {
                if size < self.segments[&self.blocks[&addr].segment] {
                    for i in [0, pool] {
                        s.inactive_split[i].current += 1;
                        s.inactive_split_bytes[i].current += size as i64;
                    }
                }
            }
        }
        s
    }
}

// ANCHOR: graph_pool
/// Which free list a new block belongs to: the pool of an open `use_mem_pool` block of this
/// thread; while the stream captures a graph, the capture's pool; otherwise the stream's. Pool
/// blocks are reused only by allocations routed to the same pool, so a replay finds its memory
/// as the capture left it.
fn owner(device: usize, stream: rt::Stream) -> u64 {
    if let Some(pool) = pools::routed_pool(device) {
        return POOL | pool;
    }
    if rt::graph::any_capturing()
        && let Some(pool) = stream.capture_pool()
    {
        return POOL | pool;
    }
    stream.id()
}
// ANCHOR_END: graph_pool

// ANCHOR: bridge_functions
/// Allocates `size` bytes on `device` for its current stream.
pub(crate) fn device_malloc(device: i64, size: usize) -> Result<usize> {
    let index = rt::check_device(device)?;
    if rt::is_in_bad_fork() {
        return Err(rt::Error::BadFork.into()); // even a cached block belongs to the parent
    }
    if size == 0 {
        return Ok(0);
    }
    let stream = rt::current_stream(device)?;
    let context = history::gather(false);
    with_cache(index, |c| c.malloc(size, owner(index, stream), context))
}

/// The deleter of every device `DataPtr`. C++ calls it from destructors, so it cannot fail:
/// problems are reported on stderr, and a panic is caught before it could reach C++.
pub(crate) fn device_free(ptr: usize) {
    let outcome = std::panic::catch_unwind(|| {
        if ptr == 0 {
            return;
        }
        match rt::device_of(ptr as *const u8) {
            Some(device) => {
                let context = history::gather(true);
                with_cache(device, |c| c.free(ptr, context))
            }
            None => _ = writeln!(std::io::stderr(), "openreg: free of {ptr:#x}, which is not device memory"),
        }
    });
    if outcome.is_err() {
        let _ = writeln!(std::io::stderr(), "openreg: freeing device memory panicked");
    }
}

/// `Tensor.record_stream(s)`: the block must not be reused before `s`'s current work is done.
pub(crate) fn record_stream(ptr: usize, device: i64, stream: i64) -> Result<()> {
    let index = rt::check_device(device)?;
    with_cache(index, |c| {
        if let Some(block) = c.blocks.get_mut(&ptr).filter(|b| b.allocated)
            && block.stream != stream as u64
            && !block.stream_uses.contains(&(stream as u64))
        {
            block.stream_uses.push(stream as u64);
        }
    });
    Ok(())
}

/// `torch.accelerator.empty_cache()`.
pub(crate) fn empty_cache() {
    for device in 0..rt::DEVICE_COUNT {
        with_cache(device, DeviceCache::release_free_segments);
    }
}
// ANCHOR_END: bridge_functions

/// For the profiler's memory events (`profile_memory=True`): the size of the block at `ptr`
/// and its device's allocated and reserved bytes. Infallible (the deleter calls it); device
/// -1 and size 0 when `ptr` is not device memory.
pub(crate) fn memory_report(ptr: usize) -> MemoryReport {
    let Some(device) = rt::device_of(ptr as *const u8) else {
        return MemoryReport { device: -1, size: 0, allocated: 0, reserved: 0 };
    };
    with_cache(device, |c| MemoryReport {
        device: device as i64,
        size: c.blocks.get(&ptr).map_or(0, |b| b.size as i64),
        allocated: c.stats.allocated_bytes[0].current as usize,
        reserved: c.stats.reserved_bytes[0].current as usize,
    })
}

pub(crate) fn device_stats(device: i64) -> Result<DeviceStats> {
    Ok(with_cache(rt::check_device(device)?, |c| c.stats()))
}

/// Every `Stat` of a device, for the resets.
fn all_stats(s: &mut DeviceStats) -> impl Iterator<Item = &mut Stat> {
    [
        &mut s.allocation,
        &mut s.segment,
        &mut s.active,
        &mut s.inactive_split,
        &mut s.allocated_bytes,
        &mut s.reserved_bytes,
        &mut s.active_bytes,
        &mut s.inactive_split_bytes,
        &mut s.requested_bytes,
    ]
    .into_iter()
    .flatten()
}

pub(crate) fn reset_peak_stats(device: i64) -> Result<()> {
    with_cache(rt::check_device(device)?, |c| {
        for stat in all_stats(&mut c.stats) {
            stat.peak = stat.current;
        }
    });
    Ok(())
}

pub(crate) fn reset_accumulated_stats(device: i64) -> Result<()> {
    with_cache(rt::check_device(device)?, |c| {
        let s = &mut c.stats;
        for stat in all_stats(s) {
            stat.allocated = 0;
            stat.freed = 0;
        }
        s.num_alloc_retries = 0;
        s.num_ooms = 0;
        s.num_device_alloc = 0;
        s.num_device_free = 0;
    });
    Ok(())
}

pub(crate) fn device_memory_info(device: i64) -> Result<MemoryInfo> {
    let (free, total) = rt::memory_info(device)?;
    Ok(MemoryInfo { free, total })
}

/// One pool's memory (`MemPool.memory_stats()`).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub segments: usize,
    pub reserved_bytes: usize,
    pub allocated_blocks: usize,
    pub allocated_bytes: usize,
    pub requested_bytes: usize,
}

pub(crate) fn pool_stats(pool: u64) -> Result<PoolStats> {
    let (device, _) = pools::mem_pool_info(pool)?;
    Ok(with_cache(device, |c| c.owner_stats(POOL | pool)))
}

// ANCHOR: snapshot
/// The allocator's state and history on every device (one pool's only, if given): the data
/// of `torch.openreg.memory._snapshot()`.
pub(crate) fn snapshot(pool: Option<u64>) -> Result<history::Snapshot> {
    let devices: Vec<usize> = match pool {
        Some(p) => vec![pools::mem_pool_info(p)?.0],
        None => (0..rt::DEVICE_COUNT).collect(),
    };
    let owner = pool.map(|p| POOL | p);
    let mut contexts = history::Contexts::default();
    let mut segments = Vec::new();
    let mut traces: Vec<Vec<history::TraceInfo>> = (0..rt::DEVICE_COUNT).map(|_| Vec::new()).collect();
    for device in devices {
        // Under the lock, only copies and reference counts; symbolizing waits until it is free.
        with_cache(device, |c| {
            c.unpark_all();
            segments.extend(c.segment_infos(owner, &mut contexts));
            traces[device] = history::trace_infos(&c.trace, owner, &mut contexts);
        });
    }
    Ok(history::Snapshot { segments, traces, tracebacks: contexts.symbolize() })
}
// ANCHOR_END: snapshot

#[cfg(test)]
mod tests;
