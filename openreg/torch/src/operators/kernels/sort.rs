//! `sort` along the last dimension of contiguous rows, stable, with the index each value came
//! from: CPU's order, NaN after every number (before, descending), equal elements in their
//! original order. `topk` takes the first k of a row sorted this way.

use std::cmp::Ordering;

use super::dtype;
use super::elementwise::parallel_min;
use super::rows::Element;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// Rows at least this long get a thread each; shorter ones are grouped.
const ROW_WORK: usize = 1 << 14;

/// CPU's ascending order of floats: NaN after everything, -0.0 equal to 0.0.
fn float_order(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Sorts each of `rows` rows of `len` elements of `input` into the first `keep` places of
/// `values` (the input's dtype) and `indices` (int64), each `rows * keep` contiguous elements.
///
/// # Safety
/// `input` holds `rows * len` elements, `values` and `indices` `rows * keep` (runtime views).
unsafe fn sort_rows(element: Element, descending: bool, input: usize, values: usize, indices: usize, rows: usize,
                    len: usize, keep: usize) {
    let size = element.size();
    parallel_min(rows, (ROW_WORK / len.max(1)).max(1), |start, count| {
        let mut order: Vec<usize> = Vec::with_capacity(len);
        let mut f = vec![0f32; len];
        let mut i = vec![0i64; len];
        for r in start..start + count {
            let src = (input + r * len * size) as *const u8;
            order.clear();
            order.extend(0..len);
            match element {
                Element::Float(d) => {
                    unsafe { dtype::load(d, src, d.size() as isize, &mut f) };
                    if descending {
                        order.sort_by(|&a, &b| float_order(f[b], f[a]));
                    } else {
                        order.sort_by(|&a, &b| float_order(f[a], f[b]));
                    }
                    let sorted: Vec<f32> = order[..keep].iter().map(|&k| f[k]).collect();
                    unsafe { dtype::store(d, (values + r * keep * size) as *mut u8, d.size() as isize, &sorted) };
                }
                Element::Int(t) => {
                    unsafe { t.load_row(src, &mut i) };
                    if descending {
                        order.sort_by(|&a, &b| i[b].cmp(&i[a]));
                    } else {
                        order.sort_by(|&a, &b| i[a].cmp(&i[b]));
                    }
                    let sorted: Vec<i64> = order[..keep].iter().map(|&k| i[k]).collect();
                    unsafe { t.store_row((values + r * keep * size) as *mut u8, &sorted) };
                }
            }
            let out = (indices as *mut i64).wrapping_add(r * keep);
            for (j, &k) in order[..keep].iter().enumerate() {
                unsafe { out.add(j).write(k as i64) };
            }
        }
    });
}

// ANCHOR: launch_sort
/// Launches a stable sort of `rows` contiguous rows of `len` elements of `input`, keeping the
/// first `keep` of each row (`len` for `sort`, k for `topk`) in `values` and `indices`. False,
/// having done nothing, for a dtype the kernel does not read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_sort(
    rows: i64, len: i64, keep: i64, input: Dense, values: Dense, indices: Dense, descending: bool, device: i64,
) -> Result<bool> {
    let Some(element) = Element::from_code(input.dtype) else { return Ok(false) };
    let [rows, len, keep] = [rows, len, keep].map(|v| v.max(0) as usize);
    if values.dtype != input.dtype || indices.dtype != 4 || keep > len || input.numel != rows * len
        || values.numel != rows * keep || indices.numel != rows * keep
    {
        return Ok(false);
    }
    if rows * keep == 0 {
        return Ok(true);
    }
    let size = element.size();
    let src = view(input.data, input.numel * size, &[input.storage, input.storage_len])?;
    let dst = view(values.data, values.numel * size, &[values.storage, values.storage_len])?;
    let idx = view(indices.data, indices.numel * 8, &[indices.storage, indices.storage_len])?;
    // SAFETY: the views were checked for their elements.
    launch(device, input.numel, move || unsafe { sort_rows(element, descending, src, dst, idx, rows, len, keep) })?;
    Ok(true)
}
// ANCHOR_END: launch_sort

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_sorts_last_and_signed_zeros_are_equal() {
        let mut v = [f32::NAN, 1.0, -0.0, 0.0, -1.0];
        v.sort_by(|a, b| float_order(*a, *b));
        assert_eq!(v[..4], [-1.0, -0.0, 0.0, 1.0]);
        assert!(v[0].is_sign_negative() && v[1].is_sign_negative() && !v[2].is_sign_negative());
        assert!(v[4].is_nan());
    }
}
