//! `tril` and `triu`: a batch of contiguous `rows` x `cols` matrices, copied with the elements
//! outside the triangle set to zero. The kernel moves bytes, so it serves every dtype (zero is
//! all-zero bytes in each); in place, `input` and `out` are the same address.

use super::factory;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// `tril`/`triu` of `batch` contiguous `rows` x `cols` matrices into `out` (contiguous, the same
/// dtype; the same address in place). False if the dtype's size is not one the kernel moves.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_triangle(
    input: Dense, out: Dense, rows: i64, cols: i64, diagonal: i64, upper: bool, device: i64,
) -> Result<bool> {
    let size = factory::element_size(input.dtype);
    if size == 0 || input.dtype != out.dtype || input.numel != out.numel {
        return Ok(false);
    }
    let [rows, cols] = [rows, cols].map(|v| v.max(0) as usize);
    if rows * cols == 0 || input.numel == 0 {
        return Ok(true);
    }
    let bytes = input.numel * size;
    let input_view = view(input.data, bytes, &[input.storage, input.storage_len])?;
    let out_view = view(out.data, bytes, &[out.storage, out.storage_len])?;
    if input_view != out_view && input_view < out_view + bytes && out_view < input_view + bytes {
        return Ok(false); // partial overlap: the caller copies first
    }
    let work = Triangle {
        batch: input.numel / (rows * cols), rows, cols, size, diagonal, upper, input: input_view, out: out_view,
    };
    // SAFETY: both views checked above, equal or disjoint.
    launch(device, input.numel, move || unsafe { work.run() })?;
    Ok(true)
}

/// The triangle to keep: element (i, j) is kept when `j - i <= diagonal` (lower) or
/// `j - i >= diagonal` (upper), as `torch.tril`/`torch.triu` define it.
#[derive(Clone, Copy)]
pub(crate) struct Triangle {
    pub(crate) batch: usize,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) size: usize,
    pub(crate) diagonal: i64,
    pub(crate) upper: bool,
    pub(crate) input: usize,
    pub(crate) out: usize,
}

impl Triangle {
    /// # Safety
    /// `input` and `out` hold `batch * rows * cols` elements of `size` bytes, and are either
    /// the same address or do not overlap.
    pub(crate) unsafe fn run(self) {
        let row_bytes = self.cols * self.size;
        for m in 0..self.batch * self.rows {
            let i = (m % self.rows) as i64;
            // Columns [keep_from, keep_to) are kept in this row.
            let (keep_from, keep_to) = if self.upper {
                ((i + self.diagonal).clamp(0, self.cols as i64) as usize, self.cols)
            } else {
                (0, (i + self.diagonal + 1).clamp(0, self.cols as i64) as usize)
            };
            let (src, dst) = (self.input + m * row_bytes, self.out + m * row_bytes);
            unsafe {
                let row = std::slice::from_raw_parts_mut(dst as *mut u8, row_bytes);
                if src != dst {
                    let kept = keep_from * self.size..keep_to.max(keep_from) * self.size;
                    std::ptr::copy_nonoverlapping((src + kept.start) as *const u8, row[kept.clone()].as_mut_ptr(), kept.len());
                }
                row[..keep_from * self.size].fill(0);
                row[keep_to.max(keep_from) * self.size..].fill(0);
            }
        }
    }
}
