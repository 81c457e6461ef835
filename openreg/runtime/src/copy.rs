//! Copies between host and device memory, synchronous or enqueued on a stream.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::memory::host_view;
use crate::pointer::{MemoryType, pointer_attributes};
use crate::stream::{Stream, current_stream};

// ANCHOR: kind
/// The direction of a copy. `Default` infers it from the pointers, like `cudaMemcpyDefault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemcpyKind {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    Default,
}
// ANCHOR_END: kind

/// A checked copy, with device addresses already translated to the runtime view.
#[derive(Clone, Copy)]
struct Plan {
    dst: usize,
    src: usize,
    len: usize,
    /// Devices whose current stream must finish first (synchronous copies).
    devices: [Option<usize>; 2],
}

fn resolve(dst: *mut u8, src: *const u8, len: usize, kind: MemcpyKind) -> Result<Plan> {
    crate::fork::check_not_forked()?;
    let (dst_attr, src_attr) = (pointer_attributes(dst), pointer_attributes(src));
    let is_dev = |t: MemoryType| t == MemoryType::Device;
    let (want_dst_dev, want_src_dev) = match kind {
        MemcpyKind::HostToHost => (false, false),
        MemcpyKind::HostToDevice => (true, false),
        MemcpyKind::DeviceToHost => (false, true),
        MemcpyKind::DeviceToDevice => (true, true),
        MemcpyKind::Default => (is_dev(dst_attr.memory_type), is_dev(src_attr.memory_type)),
    };
    let side = |ptr: *const u8, is_device: bool, found: MemoryType, role: &str| -> Result<usize> {
        if is_device {
            // Checks bounds: the whole range must be inside one live allocation.
            host_view(ptr, len).map(|p| p as usize)
        } else if found == MemoryType::Device {
            Err(Error::InvalidValue(format!(
                "{kind:?} copy: the {role} {ptr:p} is device memory, but host memory was expected"
            )))
        } else {
            Ok(ptr as usize)
        }
    };
    Ok(Plan {
        dst: side(dst, want_dst_dev, dst_attr.memory_type, "destination")?,
        src: side(src, want_src_dev, src_attr.memory_type, "source")?,
        len,
        devices: [dst_attr.device.filter(|_| want_dst_dev), src_attr.device.filter(|_| want_src_dev)],
    })
}

/// Copies below this size run on the calling thread; above it, on rayon's pool.
const PARALLEL_COPY: usize = 1 << 20;

impl Plan {
    fn run(self) {
        let (dst, src, len) = (self.dst, self.src, self.len);
        if len == 0 || dst == src {
            return;
        }
        let overlap = dst < src + len && src < dst + len;
        // SAFETY: `resolve` checked device ranges; the caller vouched for host ranges.
        unsafe {
            if overlap {
                std::ptr::copy(src as *const u8, dst as *mut u8, len);
            } else if len < PARALLEL_COPY {
                std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len);
            } else {
                let chunk = (len / (4 * rayon::current_num_threads())).max(PARALLEL_COPY / 2);
                (0..len.div_ceil(chunk)).into_par_iter().for_each(|i| {
                    let start = i * chunk;
                    let n = chunk.min(len - start);
                    std::ptr::copy_nonoverlapping((src + start) as *const u8, (dst + start) as *mut u8, n);
                });
            }
        }
    }
}

// ANCHOR: memcpy
/// Copies `len` bytes from `src` to `dst` and returns when done. It first waits for the work
/// already queued on the current stream of each device involved, so it sees their results.
///
/// # Safety
/// Host pointers must be valid for `len` bytes (device pointers are checked).
pub unsafe fn memcpy(dst: *mut u8, src: *const u8, len: usize, kind: MemcpyKind) -> Result<()> {
    let plan = resolve(dst, src, len, kind)?;
    for device in plan.devices.into_iter().flatten() {
        current_stream(device as i64)?.synchronize()?;
    }
    // Traced as work of the device's current stream, where CUDA's blocking copies run too.
    match plan.devices.into_iter().flatten().next() {
        Some(device) => crate::stream::run_observed(device, current_stream(device as i64)?.id(), move || plan.run()),
        None => plan.run(),
    }
    Ok(())
}

/// Enqueues the copy on `stream` and returns at once. A copy of up to [`INLINE_COPY`] bytes on
/// an idle stream runs at once instead, as small kernels do: in stream order all the same, and
/// without the hop to the stream's worker, which costs more than the copy.
///
/// # Safety
/// Host pointers must be valid for `len` bytes until the copy has run.
pub unsafe fn memcpy_async(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    kind: MemcpyKind,
    stream: &Stream,
) -> Result<()> {
    let plan = resolve(dst, src, len, kind)?;
    if len <= INLINE_COPY {
        stream.run_or_launch(move || plan.run())
    } else {
        stream.launch(move || plan.run())
    }
}

/// The largest copy [`memcpy_async`] may run on the calling thread.
const INLINE_COPY: usize = 1 << 20;
// ANCHOR_END: memcpy
