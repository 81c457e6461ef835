//! Kernels in Rust: the device's own work. They are given device addresses, which the host
//! cannot dereference, and are queued on the current stream of the device that holds their
//! output; there they reach the memory through the runtime's view of it
//! (`memory::device_view`), as a real device's kernels address memory the host cannot.

use crate::memory::{device_of, device_view};
use crate::stream::launch_current;

// ANCHOR: binary
/// `out = |a|` over a TensorIterator's operands (see `elementwise_f32`).
pub fn abs_f32(data: &[usize], shape: &[i64], strides: &[i64]) -> Result<(), String> {
    elementwise_f32(|[a]| a.abs(), data, shape, strides)
}

/// `out = a + alpha * b`.
pub fn add_f32(alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) -> Result<(), String> {
    elementwise_f32(move |[a, b]| a + alpha * b, data, shape, strides)
}

/// `out = a * b` (the signature is every binary kernel's; mul has no alpha).
pub fn mul_f32(_alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) -> Result<(), String> {
    elementwise_f32(|[a, b]| a * b, data, shape, strides)
}

/// `out = op(inputs)` over a TensorIterator's float32 operands (`data` = out, then the N
/// inputs, as device addresses): `shape[0]` is the fastest dimension, `strides` holds each
/// operand's byte strides, operand by operand, so broadcasting is a 0 stride.
fn elementwise_f32<const N: usize>(
    op: impl Fn([f32; N]) -> f32 + Send + 'static,
    data: &[usize],
    shape: &[i64],
    strides: &[i64],
) -> Result<(), String> {
    let ndim = shape.len();
    let total: i64 = shape.iter().product();
    if total == 0 {
        return Ok(());
    }
    let (shape, strides) = (shape.to_vec(), strides.to_vec()); // the task outlives the call
    let stride = move |k: usize, d: usize| strides[k * ndim + d] as isize;
    // Each operand's memory, through the runtime: the bytes from its first element to its
    // last (strides are never negative in PyTorch). Checked now, so that a bad address is an
    // error at the call, not at the next synchronize.
    let mut base = [0usize; 8];
    for k in 0..=N {
        let extent: isize = (0..ndim).map(|d| (shape[d] as isize - 1) * stride(k, d)).sum();
        base[k] = device_view(data[k], extent as usize + 4)? as usize;
    }
    launch_current(device_of(data[0])?, Box::new(move || {
        let mut index = vec![0i64; ndim];
        for _ in 0..total {
            // The byte offset of the current element in operand k.
            let at = |k: usize| (0..ndim).map(|d| index[d] as isize * stride(k, d)).sum::<isize>();
            // SAFETY: every offset below `shape` stays inside the extent checked above, and
            // the caching allocator keeps the memory for this stream's queued work.
            unsafe {
                let inputs: [f32; N] = std::array::from_fn(|i| *((base[i + 1] as isize + at(i + 1)) as *const f32));
                *((base[0] as isize + at(0)) as *mut f32) = op(inputs);
            }
            // Next index, dimension 0 fastest.
            for d in 0..ndim {
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(())
    }))
}
// ANCHOR_END: binary
