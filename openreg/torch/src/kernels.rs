//! Kernels written in Rust, launched on the current stream of their device. A kernel
//! receives device addresses, checks and translates them to the runtime's view when it is
//! launched, and runs later on the stream's worker.

use openreg_runtime as rt;
use rayon::prelude::*;

use crate::error::Result;

/// Elements per parallel chunk: below this a kernel runs on the stream's worker alone.
const CHUNK: usize = 1 << 16;

// ANCHOR: abs
/// `dst[i] = |src[i]|` for `n` contiguous float32 elements on `device`.
pub(crate) fn launch_abs_f32(dst: usize, src: usize, n: usize, device: i64) -> Result<()> {
    if n == 0 {
        return Ok(()); // empty tensors may have no memory at all
    }
    let bytes = n * std::mem::size_of::<f32>();
    let (dst, src) = (rt::host_view(dst as *const u8, bytes)? as usize, rt::host_view(src as *const u8, bytes)? as usize);
    let stream = rt::current_stream(device)?;
    stream.launch(move || {
        // SAFETY: both ranges were checked to lie in live device allocations, which the
        // caching allocator does not hand out again before this stream has run this task.
        let (src, dst) = unsafe {
            (std::slice::from_raw_parts(src as *const f32, n), std::slice::from_raw_parts_mut(dst as *mut f32, n))
        };
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                *d = s.abs();
            }
        });
    })?;
    Ok(())
}
// ANCHOR_END: abs
