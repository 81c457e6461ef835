//! Copies for `_copy_from` and friends.

use openreg_runtime as rt;

use crate::error::Result;

/// A synchronous copy in whatever direction the pointers say.
pub(crate) fn copy_bytes(dst: usize, src: usize, len: usize) -> Result<()> {
    // SAFETY: the C++ caller passes tensor storage it owns for the duration of the call; the
    // runtime checks the device side of the range.
    unsafe { rt::memcpy(dst as *mut u8, src as *const u8, len, rt::MemcpyKind::Default)? };
    Ok(())
}

/// The host-accessible address of device memory, after waiting for the work already queued
/// on the device's current stream (host code is about to read or write it).
pub(crate) fn host_view(ptr: usize, len: usize) -> Result<usize> {
    let view = rt::host_view(ptr as *const u8, len)?;
    if let Some(device) = rt::pointer_attributes(ptr as *const u8).device {
        rt::current_stream(device as i64)?.synchronize()?;
    }
    Ok(view as usize)
}
