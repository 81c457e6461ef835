//! `histc`: counts of a tensor's elements in `bins` equal bins over `[min, max]`, with the last
//! bin closed. An element's bin is `(x - min) * bins / (max - min)`, truncated: floating-point
//! elements in float32, as CPU's kernel computes it for histc (its linear interpolation, without
//! the edge search `histogram` adds), integers exactly, as CUDA's kernel does (CPU has no integer
//! histc). Elements outside the range, and NaN, are not counted.

use super::dtype;
use super::rows::Element;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// The bin of `x` among `bins` bins over `[lo, hi]`, or None outside the range.
fn float_bin(x: f32, lo: f32, hi: f32, bins: usize) -> Option<usize> {
    if !(x >= lo && x <= hi) {
        return None; // outside, or NaN
    }
    let bin = ((x - lo) * bins as f32 / (hi - lo)) as usize;
    Some(bin.min(bins - 1))
}

/// The bin of integer `x` among `bins` bins over `[lo, hi]`: CUDA's `(x - lo) * bins / (hi - lo)`,
/// exactly, the last bin closed.
fn int_bin(x: i64, lo: i64, hi: i64, bins: i64) -> Option<usize> {
    if x < lo || x > hi {
        return None;
    }
    let bin = (i128::from(x) - i128::from(lo)) * i128::from(bins) / (i128::from(hi) - i128::from(lo));
    Some(bin.min(i128::from(bins) - 1) as usize)
}

// ANCHOR: launch_histc
/// Launches `histc` of contiguous `input` into contiguous `out` (`bins` elements, the input's
/// dtype) over `[min, max]` (the caller has resolved an empty range and checked `min < max`).
/// False, having done nothing, for a dtype the kernel does not read.
pub(crate) fn launch_histc(input: Dense, out: Dense, bins: i64, min: f64, max: f64, device: i64) -> Result<bool> {
    let Some(element) = Element::from_code(input.dtype) else { return Ok(false) };
    let bins = bins.max(1) as usize;
    if out.dtype != input.dtype || out.numel != bins {
        return Ok(false);
    }
    let size = element.size();
    let src = view(input.data, input.numel * size, &[input.storage, input.storage_len])?;
    let dst = view(out.data, bins * size, &[out.storage, out.storage_len])?;
    let n = input.numel;
    launch(device, n, move || {
        let mut counts = vec![0i64; bins];
        match element {
            Element::Float(d) => {
                let (lo, hi) = (min as f32, max as f32);
                let mut buf = vec![0f32; 4096.min(n.max(1))];
                for start in (0..n).step_by(buf.len()) {
                    let chunk = &mut buf[..(n - start).min(4096)];
                    // SAFETY: the view holds n elements of this dtype.
                    unsafe { dtype::load(d, (src + start * size) as *const u8, size as isize, chunk) };
                    for &x in chunk.iter() {
                        if let Some(b) = float_bin(x, lo, hi, bins) {
                            counts[b] += 1;
                        }
                    }
                }
                let values: Vec<f32> = counts.iter().map(|&c| c as f32).collect();
                // SAFETY: the output view holds `bins` elements of this dtype.
                unsafe { dtype::store(d, dst as *mut u8, d.size() as isize, &values) };
            }
            Element::Int(t) => {
                let (lo, hi) = (min as i64, max as i64);
                let mut buf = vec![0i64; 4096.min(n.max(1))];
                for start in (0..n).step_by(buf.len()) {
                    let chunk = &mut buf[..(n - start).min(4096)];
                    // SAFETY: the view holds n elements of this type.
                    unsafe { t.load_row((src + start * size) as *const u8, chunk) };
                    for &x in chunk.iter() {
                        if let Some(b) = int_bin(x, lo, hi, bins as i64) {
                            counts[b] += 1;
                        }
                    }
                }
                // SAFETY: the output view holds `bins` elements of this type.
                unsafe { t.store_row(dst as *mut u8, &counts) };
            }
        }
    })?;
    Ok(true)
}
// ANCHOR_END: launch_histc

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_interpolate_and_the_last_bin_is_closed() {
        assert_eq!(float_bin(0.0, 0.0, 1.0, 3), Some(0));
        assert_eq!(float_bin(1.0, 0.0, 1.0, 3), Some(2));
        assert_eq!(float_bin(0.5, 0.0, 1.0, 3), Some(1));
        assert_eq!(float_bin(1.5, 0.0, 1.0, 3), None);
        assert_eq!(float_bin(f32::NAN, 0.0, 1.0, 3), None);
    }

    #[test]
    fn integers_are_placed_exactly() {
        assert_eq!(int_bin(0, 0, 7, 8), Some(0));
        assert_eq!(int_bin(7, 0, 7, 8), Some(7));
        assert_eq!(int_bin(3, 0, 7, 8), Some(3));
        assert_eq!(int_bin(8, 0, 7, 8), None);
        assert_eq!(int_bin(i64::MAX, i64::MIN, i64::MAX, 2), Some(1));
    }
}
