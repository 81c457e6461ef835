//! Memory pools (`torch.openreg.MemPool`): blocks that only allocations routed to the pool may
//! reuse. A pool lives while something refers to it: its Python object, a `use_mem_pool`
//! block, a graph that captured into it. When the last reference goes, its free segments go
//! back to the device, and so do the rest as their tensors are freed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use openreg_runtime as rt;

use crate::error::Result;

/// Free-list owners at or above this are pools, below it streams.
pub(crate) const POOL: u64 = 1 << 62;

struct PoolState {
    device: usize,
    references: usize,
}

static POOLS: Mutex<Option<HashMap<u64, PoolState>>> = Mutex::new(None);

fn with_pools<R>(f: impl FnOnce(&mut HashMap<u64, PoolState>) -> R) -> R {
    f(POOLS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new))
}

thread_local! {
    /// `use_mem_pool` blocks of this thread, innermost last: (device, pool).
    static ROUTED: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
}

fn unknown(pool: u64) -> rt::Error {
    rt::Error::InvalidValue(format!("MemPool (0, {pool}) does not exist (it was released, or never created)"))
}

// ANCHOR: pools
/// A new pool on `device`, with one reference (its creator's).
pub(crate) fn mem_pool_create(device: i64) -> Result<u64> {
    let device = rt::check_device(device)?;
    let id = rt::graph::new_pool();
    with_pools(|pools| pools.insert(id, PoolState { device, references: 1 }));
    Ok(id)
}

pub(crate) fn mem_pool_retain(pool: u64) -> Result<()> {
    with_pools(|pools| match pools.get_mut(&pool) {
        Some(state) => {
            state.references += 1;
            Ok(())
        }
        None => Err(unknown(pool).into()),
    })
}

/// Drops a reference; the last one releases the pool's memory (infallible: destructors call it).
pub(crate) fn mem_pool_release(pool: u64) {
    let gone = with_pools(|pools| {
        let state = pools.get_mut(&pool)?;
        state.references -= 1;
        if state.references > 0 {
            return None;
        }
        pools.remove(&pool).map(|s| s.device)
    });
    if let Some(device) = gone {
        super::with_cache(device, |c| c.release_pool(POOL | pool));
    }
}

/// The device of a live pool, and its references.
pub(crate) fn mem_pool_info(pool: u64) -> Result<(usize, usize)> {
    with_pools(|pools| pools.get(&pool).map(|s| (s.device, s.references)).ok_or_else(|| unknown(pool).into()))
}

/// `use_mem_pool(pool)`: this thread's allocations on `device` go to `pool` until the matching
/// `end_allocate_to_pool`. The block holds a reference.
pub(crate) fn begin_allocate_to_pool(device: i64, pool: u64) -> Result<()> {
    let device = rt::check_device(device)?;
    let (home, _) = mem_pool_info(pool)?;
    if home != device {
        return Err(rt::Error::InvalidValue(format!(
            "MemPool (0, {pool}) belongs to openreg:{home}; it cannot serve allocations on openreg:{device}"
        ))
        .into());
    }
    mem_pool_retain(pool)?;
    ROUTED.with(|r| r.borrow_mut().push((device, pool)));
    Ok(())
}

pub(crate) fn end_allocate_to_pool(device: i64, pool: u64) -> Result<()> {
    let device = rt::check_device(device)?;
    let ended = ROUTED.with(|r| {
        let mut routed = r.borrow_mut();
        let last = routed.iter().rposition(|&(d, _)| d == device);
        match last {
            Some(i) if routed[i].1 == pool => {
                routed.remove(i);
                true
            }
            _ => false,
        }
    });
    if !ended {
        return Err(rt::Error::InvalidValue(format!(
            "MemPool (0, {pool}) is not the pool this thread allocates to on openreg:{device}: \
             use_mem_pool blocks end innermost first"
        ))
        .into());
    }
    mem_pool_release(pool);
    Ok(())
}

/// The pool this thread's allocations on `device` go to, if a `use_mem_pool` block is open.
pub(crate) fn routed_pool(device: usize) -> Option<u64> {
    ROUTED.with(|r| r.borrow().iter().rev().find(|&&(d, _)| d == device).map(|&(_, p)| p))
}
// ANCHOR_END: pools
