//! `nonzero`: the coordinates of a mask's true elements, in row-major order, as an int64
//! `[count, dims]` tensor. The count sizes the output, so the glue reads it first (a device
//! reduction copied to the host, which waits for the stream, as CUDA's nonzero does);
//! this kernel then writes the coordinates on the stream.

use openreg_runtime as rt;

use super::dtype::INT64;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::Dense;

/// `c10::ScalarType::Bool`.
const BOOL: i8 = 11;

/// Launches the coordinates of `mask`'s (contiguous bool, of `sizes`) true elements into `out`
/// (contiguous int64, `count * sizes.len()` elements).
pub(crate) fn launch_nonzero(mask: Dense, sizes: &[i64], out: Dense, count: i64, device: i64) -> Result<()> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("nonzero: {what}")));
    if mask.dtype != BOOL || out.dtype != INT64 {
        return Err(invalid(format!("a bool mask and an int64 output expected, got dtypes {} and {}", mask.dtype, out.dtype)));
    }
    let numel = sizes.iter().try_fold(1usize, |n, &s| usize::try_from(s).ok().and_then(|s| n.checked_mul(s)));
    let (Some(numel), Ok(count)) = (numel, usize::try_from(count)) else {
        return Err(invalid(format!("invalid sizes {sizes:?} or count {count}")));
    };
    if mask.numel != numel || count > numel || out.numel != count * sizes.len() {
        return Err(invalid(format!("{} mask and {} output elements for sizes {sizes:?} and {count} found", mask.numel, out.numel)));
    }
    if out.numel == 0 {
        return Ok(());
    }
    let mask_at = view(mask.data, numel, &[mask.storage, mask.storage_len])?;
    let out_at = view(out.data, out.numel * 8, &[out.storage, out.storage_len])?;
    let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    launch(device, numel, move || {
        // SAFETY: `numel` mask bytes and `count * dims` int64 outputs, checked at launch.
        let mask = unsafe { std::slice::from_raw_parts(mask_at as *const u8, numel) };
        let out = unsafe { std::slice::from_raw_parts_mut(out_at as *mut i64, count * sizes.len()) };
        coordinates(mask, &sizes, out);
    })?;
    Ok(())
}

/// Writes the row-major coordinates of `mask`'s true elements into `out`, one row of
/// `sizes.len()` per element, stopping when `out` is full.
pub(crate) fn coordinates(mask: &[u8], sizes: &[usize], out: &mut [i64]) {
    let dims = sizes.len();
    let mut at = vec![0usize; dims];
    let mut rows = out.chunks_exact_mut(dims.max(1));
    for &m in mask {
        if m != 0 {
            let Some(row) = rows.next() else { return };
            for (o, &a) in row.iter_mut().zip(&at) {
                *o = a as i64;
            }
        }
        // The next element's coordinates: the last dimension moves fastest.
        for d in (0..dims).rev() {
            at[d] += 1;
            if at[d] < sizes[d] {
                break;
            }
            at[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::coordinates;

    #[test]
    fn row_major_coordinates_of_true_elements() {
        // [[0, 1, 0], [1, 0, 1]]
        let mut out = [0i64; 6];
        coordinates(&[0, 1, 0, 1, 0, 1], &[2, 3], &mut out);
        assert_eq!(out, [0, 1, 1, 0, 1, 2]);
        let mut flat = [0i64; 2];
        coordinates(&[1, 0, 1], &[3], &mut flat);
        assert_eq!(flat, [0, 2]);
    }
}
