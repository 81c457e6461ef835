//! Device memory for PyTorch's `c10::DeviceAllocator`, with the statistics behind
//! `torch.accelerator.memory_allocated()` and friends.
//!
//! Every allocation goes straight to the runtime (no caching yet), so reserved memory equals
//! allocated memory; `requested_bytes` keeps the sizes as asked, before page rounding.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use openreg_runtime as rt;

use crate::error::Result;
use crate::ffi::ffi::{DeviceStats, MemoryInfo, Stat};

/// Blocks up to this size count as the "small pool", like CUDA's caching allocator.
const SMALL_SIZE: usize = 1 << 20;

struct Tracker {
    stats: [DeviceStats; rt::DEVICE_COUNT],
    /// Live allocations: pointer -> (device, requested, rounded).
    live: HashMap<usize, (usize, usize, usize)>,
}

static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);

fn tracker() -> MutexGuard<'static, Option<Tracker>> {
    TRACKER.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_tracker<R>(f: impl FnOnce(&mut Tracker) -> R) -> R {
    let mut guard = tracker();
    let t = guard.get_or_insert_with(|| Tracker {
        stats: [DeviceStats::default(); rt::DEVICE_COUNT],
        live: HashMap::new(),
    });
    f(t)
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

/// Updates the aggregate entry and the entry of the pool the block belongs to.
fn update(stats: &mut [Stat; 3], rounded: usize, amount: i64) {
    let pool = if rounded <= SMALL_SIZE { 1 } else { 2 };
    for i in [0, pool] {
        if amount >= 0 { stats[i].increase(amount) } else { stats[i].decrease(-amount) }
    }
}
// ANCHOR_END: stat

fn record(stats: &mut DeviceStats, requested: usize, rounded: usize, sign: i64) {
    update(&mut stats.allocation, rounded, sign);
    update(&mut stats.segment, rounded, sign);
    update(&mut stats.allocated_bytes, rounded, sign * rounded as i64);
    update(&mut stats.reserved_bytes, rounded, sign * rounded as i64);
    update(&mut stats.requested_bytes, rounded, sign * requested as i64);
}

// ANCHOR: malloc
pub(crate) fn device_malloc(device: i64, size: usize) -> Result<usize> {
    let index = rt::check_device(device)?;
    let ptr = match rt::malloc(device, size) {
        Ok(ptr) => ptr as usize,
        Err(e) => {
            if matches!(e, rt::Error::OutOfMemory { .. }) {
                with_tracker(|t| t.stats[index].num_ooms += 1);
            }
            return Err(e.into());
        }
    };
    if ptr != 0 {
        let rounded = size.div_ceil(rt::memory::page_size()) * rt::memory::page_size();
        with_tracker(|t| {
            t.live.insert(ptr, (index, size, rounded));
            let stats = &mut t.stats[index];
            stats.num_device_alloc += 1;
            record(stats, size, rounded, 1);
        });
    }
    Ok(ptr)
}

/// The deleter of every device `DataPtr`. C++ calls it from destructors, so it cannot fail:
/// problems are reported on stderr, and a panic is caught before it could reach C++.
pub(crate) fn device_free(ptr: usize) {
    let outcome = std::panic::catch_unwind(|| {
        if ptr == 0 {
            return Ok(());
        }
        with_tracker(|t| {
            if let Some((index, requested, rounded)) = t.live.remove(&ptr) {
                let stats = &mut t.stats[index];
                stats.num_device_free += 1;
                record(stats, requested, rounded, -1);
            }
        });
        rt::free(ptr as *mut u8)
    });
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => _ = writeln!(std::io::stderr(), "openreg: freeing device memory: {e}"),
        Err(_) => _ = writeln!(std::io::stderr(), "openreg: freeing device memory panicked"),
    }
}
// ANCHOR_END: malloc

/// Every `Stat` of a device, for the resets.
fn all_stats(s: &mut DeviceStats) -> impl Iterator<Item = &mut Stat> {
    [&mut s.allocation, &mut s.segment, &mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.requested_bytes]
        .into_iter()
        .flatten()
}

pub(crate) fn device_stats(device: i64) -> Result<DeviceStats> {
    let index = rt::check_device(device)?;
    Ok(with_tracker(|t| t.stats[index]))
}

pub(crate) fn reset_peak_stats(device: i64) -> Result<()> {
    let index = rt::check_device(device)?;
    with_tracker(|t| {
        for stat in all_stats(&mut t.stats[index]) {
            stat.peak = stat.current;
        }
    });
    Ok(())
}

pub(crate) fn reset_accumulated_stats(device: i64) -> Result<()> {
    let index = rt::check_device(device)?;
    with_tracker(|t| {
        let s = &mut t.stats[index];
        for stat in all_stats(s) {
            stat.allocated = 0;
            stat.freed = 0;
        }
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

/// `torch.accelerator.empty_cache()`: nothing is cached here, but the runtime keeps freed
/// device pages committed for reuse; this gives them back to the host.
pub(crate) fn empty_cache() {
    for device in 0..rt::DEVICE_COUNT {
        let _ = rt::trim(device as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn statistics_follow_allocations() {
        let before = device_stats(1).unwrap();
        let small = device_malloc(1, 1000).unwrap();
        let large = device_malloc(1, 3 << 20).unwrap();
        let s = device_stats(1).unwrap();
        let delta = |a: &[Stat; 3], b: &[Stat; 3], i: usize| a[i].current - b[i].current;
        assert_eq!(delta(&s.allocated_bytes, &before.allocated_bytes, 0), 4096 + (3 << 20));
        assert_eq!(delta(&s.allocated_bytes, &before.allocated_bytes, 1), 4096, "small pool");
        assert_eq!(delta(&s.allocated_bytes, &before.allocated_bytes, 2), 3 << 20, "large pool");
        assert_eq!(delta(&s.requested_bytes, &before.requested_bytes, 0), 1000 + (3 << 20));
        assert_eq!(delta(&s.allocation, &before.allocation, 0), 2);
        assert_eq!(s.reserved_bytes[0].current, s.allocated_bytes[0].current);
        assert!(s.allocated_bytes[0].peak >= s.allocated_bytes[0].current);

        device_free(large);
        device_free(small);
        let after = device_stats(1).unwrap();
        assert_eq!(after.allocated_bytes[0].current, before.allocated_bytes[0].current);
        assert_eq!(after.num_device_free - before.num_device_free, 2);
        assert!(after.allocated_bytes[0].peak >= before.allocated_bytes[0].current + (3 << 20));
        reset_peak_stats(1).unwrap();
        let reset = device_stats(1).unwrap();
        assert_eq!(reset.allocated_bytes[0].peak, reset.allocated_bytes[0].current);
        reset_accumulated_stats(1).unwrap();
        assert_eq!(device_stats(1).unwrap().allocated_bytes[0].allocated, 0);
    }

    #[test]
    fn out_of_memory_is_counted_and_bad_frees_do_not_panic() {
        let ooms = device_stats(0).unwrap().num_ooms;
        assert!(device_malloc(0, 1 << 40).is_err());
        assert_eq!(last_kind(), ErrorKind::OutOfMemory);
        assert_eq!(device_stats(0).unwrap().num_ooms, ooms + 1);
        device_free(0x1234); // reported on stderr, nothing else
        assert!(device_malloc(9, 8).is_err());
        assert_eq!(last_kind(), ErrorKind::Runtime);
    }

    fn last_kind() -> ErrorKind {
        crate::error::last_error_kind()
    }
}
