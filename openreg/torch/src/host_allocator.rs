//! Pinned host memory for `pin_memory()`, and pointer queries for the hooks.

use std::io::Write;

use openreg_runtime as rt;

use crate::error::Result;

pub(crate) fn host_malloc(size: usize) -> Result<usize> {
    Ok(rt::host_malloc(size)? as usize)
}

/// Called from a C++ deleter, which cannot fail: errors are reported, not raised.
pub(crate) fn host_free(ptr: usize) {
    if let Err(e) = rt::host_free(ptr as *mut u8) {
        let _ = writeln!(std::io::stderr(), "openreg: freeing pinned memory: {e}");
    }
}

pub(crate) fn is_pinned(ptr: usize) -> bool {
    rt::pointer_attributes(ptr as *const u8).memory_type == rt::MemoryType::Host
}

/// The device of a device pointer, or -1.
pub(crate) fn pointer_device(ptr: usize) -> i8 {
    rt::pointer_attributes(ptr as *const u8).device.map_or(-1, |d| d as i8)
}
