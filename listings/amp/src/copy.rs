//! Copies between host and device, as stream work: queued on the current stream of the
//! device that owns the device memory, in order with its other work. A copy to the device
//! owns its bytes and returns at once; a copy to the host waits, because the caller reads the
//! bytes next.

use crate::memory::{device_of, device_view};
use crate::stream::{current_stream, launch_current, stream};

// ANCHOR: copies
pub fn copy_host_to_device(dst: usize, src: &[u8]) -> Result<(), String> {
    if src.is_empty() {
        return Ok(());
    }
    let bytes = src.to_vec(); // the caller's buffer may be gone when the copy runs
    launch_current(device_of(dst)?, Box::new(move || {
        let to = device_view(dst, bytes.len())?;
        // SAFETY: `to` is valid for bytes.len() bytes (checked) and cannot overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), to, bytes.len()) };
        Ok(())
    }))
}

pub fn copy_device_to_host(dst: &mut [u8], src: usize) -> Result<(), String> {
    if dst.is_empty() {
        return Ok(());
    }
    let device = device_of(src)?;
    let stream = stream(device, current_stream(device)?)?;
    let (to, len) = (dst.as_mut_ptr() as usize, dst.len());
    stream.launch(Box::new(move || {
        let from = device_view(src, len)?;
        // SAFETY: `dst` outlives the task: this function waits for it below.
        unsafe { std::ptr::copy_nonoverlapping(from, to as *mut u8, len) };
        Ok(())
    }));
    stream.synchronize()
}

pub fn copy_device_to_device(dst: usize, src: usize, len: usize) -> Result<(), String> {
    if len == 0 {
        return Ok(());
    }
    launch_current(device_of(dst)?, Box::new(move || {
        let (to, from) = (device_view(dst, len)?, device_view(src, len)?);
        // SAFETY: both ranges are checked; `copy` allows them to overlap.
        unsafe { std::ptr::copy(from, to, len) };
        Ok(())
    }))
}
// ANCHOR_END: copies
