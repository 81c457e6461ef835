//! Host ("pinned") memory: page-aligned host allocations the runtime knows about, so that
//! `is_pinned` can answer and copies from them may run asynchronously.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::memory::page_size;

static HOST: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

fn host() -> std::sync::MutexGuard<'static, BTreeMap<usize, usize>> {
    HOST.lock().unwrap_or_else(|e| e.into_inner())
}

fn layout(size: usize) -> Result<Layout> {
    Layout::from_size_align(size, page_size())
        .map_err(|_| Error::InvalidValue(format!("cannot allocate {size} bytes of host memory")))
}

// ANCHOR: host
/// Allocates `size` bytes of page-aligned host memory. A size of 0 gives a null pointer.
pub fn host_malloc(size: usize) -> Result<*mut u8> {
    crate::fork::check_not_forked()?;
    crate::fork::mark_initialised();
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc(layout(size)?) };
    if ptr.is_null() {
        return Err(Error::System { call: "host_malloc", errno: libc::ENOMEM });
    }
    host().insert(ptr as usize, size);
    Ok(ptr)
}

/// Frees memory returned by [`host_malloc`].
pub fn host_free(ptr: *mut u8) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    let size = host().remove(&(ptr as usize)).ok_or(Error::InvalidPointer {
        addr: ptr as usize,
        len: 0,
        expected: "a pointer returned by host_malloc (was it freed already?)",
    })?;
    // SAFETY: `ptr` came from `alloc` with this layout and was still registered.
    unsafe { std::alloc::dealloc(ptr, layout(size)?) };
    Ok(())
}
// ANCHOR_END: host

/// The pinned allocation `(base, len)` containing `addr`, if any.
pub(crate) fn host_allocation_of(addr: usize) -> Option<(usize, usize)> {
    let map = host();
    let (&base, &len) = map.range(..=addr).next_back()?;
    (addr < base + len).then_some((base, len))
}
