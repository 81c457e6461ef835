//! Writes at element offsets: `index_put_` (`x[idx] = v`, and `+=` with accumulate), scatter,
//! index_add and masked_scatter_. The glue turns the index values into offsets from the target's
//! first element (csrc/operators/Indexing.cpp, Gather.cpp); the kernel writes each value at its
//! offset, in order, so that of two writes to one element the later one stays, as on CPU.

use openreg_runtime as rt;

use super::dtype::{self, Dtype};
use super::integer::Int;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// The bytes of one element of a dtype (by its `c10::ScalarType` code) the kernel moves: every
/// integer, floating and complex type; 0 for any other.
fn byte_size(code: i8) -> usize {
    match code {
        0 | 1 | 11 => 1,           // uint8, int8, bool
        2 | 5 | 15 | 27 => 2,      // int16, half, bfloat16, uint16
        3 | 6 | 8 | 28 => 4,       // int32, float, complex32, uint32
        4 | 7 | 9 | 29 => 8,       // int64, double, complex64, uint64
        10 => 16,                  // complex128
        _ => 0,
    }
}

// ANCHOR: launch_index_put
/// Launches `target[offsets[i]] = values[i]` (`+=` with `accumulate`) for contiguous `values`
/// of the target's dtype. Any dtype is written; accumulation is in the element's own arithmetic
/// (floating point through float32, integers exactly), and false for a dtype it has none for.
pub(crate) fn launch_index_put(target: Dense, offsets: &[i64], values: Dense, accumulate: bool, device: i64) -> Result<bool> {
    let size = byte_size(target.dtype);
    let float = Dtype::from_code(target.dtype);
    let int = Int::from_code(target.dtype).filter(|&t| t != Int::Bool);
    if size == 0 || values.dtype != target.dtype || (accumulate && float.is_none() && int.is_none()) {
        return Ok(false);
    }
    if values.numel != offsets.len() || offsets.iter().any(|&o| o < 0) {
        return Err(rt::Error::InvalidValue(format!("index_put_: {} values for {} offsets", values.numel, offsets.len())).into());
    }
    let Some(&last) = offsets.iter().max() else { return Ok(true) };
    let base = view(target.data, (last as usize + 1) * size, &[target.storage, target.storage_len])?;
    let source = view(values.data, values.numel * size, &[values.storage, values.storage_len])?;
    let offsets: std::sync::Arc<[i64]> = offsets.into();
    launch(device, offsets.len(), move || {
        for (i, &o) in offsets.iter().enumerate() {
            let (at, from) = ((base + o as usize * size) as *mut u8, (source + i * size) as *const u8);
            // SAFETY: checked above: the values' elements, every offset inside the target.
            unsafe {
                match (accumulate, float, int) {
                    (false, _, _) => std::ptr::copy_nonoverlapping(from, at, size),
                    (true, Some(d), _) => {
                        let (mut old, mut v) = ([0f32], [0f32]);
                        dtype::load(d, at, size as isize, &mut old);
                        dtype::load(d, from, size as isize, &mut v);
                        dtype::store(d, at, size as isize, &[old[0] + v[0]]);
                    }
                    (true, None, Some(t)) => t.write(at, t.read(at).wrapping_add(t.read(from))),
                    (true, None, None) => {}
                }
            }
        }
    })?;
    Ok(true)
}
// ANCHOR_END: launch_index_put
