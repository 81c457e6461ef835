//! Copies for `_copy_from` and friends.

use openreg_runtime as rt;

use crate::error::Result;
use crate::runtime::host_allocator::{is_pinned, record_host_event};

// ANCHOR: copy_bytes
/// Copies `len` bytes in whatever direction the pointers say, as CUDA does:
/// * device to device is work for the device: queued on the destination device's current
///   stream (after the source device's current stream, if that is another device);
/// * with `non_blocking` and pinned host memory, queued on the device's current stream too,
///   with an event that keeps the pinned block from reuse until the copy ran;
/// * anything else (pageable host memory, or blocking) is synchronous.
pub(crate) fn copy_bytes(dst: usize, src: usize, len: usize, non_blocking: bool) -> Result<()> {
    let (to, from) = (rt::device_of(dst as *const u8), rt::device_of(src as *const u8));
    // SAFETY: the C++ caller passes tensor storage that the caching allocator keeps from
    // reuse until the stream has run the copy; the runtime checks device ranges now.
    unsafe {
        match (to, from) {
            (Some(to), Some(from)) => {
                let stream = rt::current_stream(to as i64)?;
                if from != to {
                    let ready = rt::Event::new(false);
                    ready.record(&rt::current_stream(from as i64)?)?;
                    stream.wait_event(&ready)?;
                }
                rt::memcpy_async(dst as *mut u8, src as *const u8, len, rt::MemcpyKind::DeviceToDevice, &stream)?
            }
            (Some(device), None) | (None, Some(device))
                if non_blocking && is_pinned(if to.is_some() { src } else { dst }) =>
            {
                let stream = rt::current_stream(device as i64)?;
                rt::memcpy_async(dst as *mut u8, src as *const u8, len, rt::MemcpyKind::Default, &stream)?;
                let host = if to.is_some() { src } else { dst };
                record_host_event(host, device as i64, stream.id() as i64)?;
            }
            _ => rt::memcpy(dst as *mut u8, src as *const u8, len, rt::MemcpyKind::Default)?,
        }
    }
    Ok(())
}
// ANCHOR_END: copy_bytes

/// The host-accessible address of device memory, after waiting for the work already queued
/// on the device's current stream (host code is about to read or write it).
pub(crate) fn host_view(ptr: usize, len: usize) -> Result<usize> {
    if len == 0 {
        return Ok(ptr); // nothing to see: an empty tensor may have no allocation at all
    }
    let view = rt::host_view(ptr as *const u8, len)?;
    if let Some(device) = rt::pointer_attributes(ptr as *const u8).device {
        rt::current_stream(device as i64)?.synchronize()?;
    }
    Ok(view as usize)
}
