//! Kernels in Rust. At this stage device memory is host memory and there are no streams, so a
//! kernel runs at once on the addresses it is given; the full backend (`openreg/torch`)
//! checks and translates addresses and queues kernels on streams.

/// `dst[i] = |src[i]|` for `n` contiguous float32 elements.
pub fn abs_f32(dst: usize, src: usize, n: usize) {
    for i in 0..n {
        // SAFETY: C++ passes the data of two tensors of n float32 elements.
        unsafe { *(dst as *mut f32).add(i) = (*(src as *const f32).add(i)).abs() };
    }
}

// ANCHOR: binary
/// `out = a + alpha * b` over a TensorIterator's operands (see `binary_f32`).
pub fn add_f32(alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) {
    binary_f32(|a, b| a + alpha * b, data, shape, strides);
}

/// `out = a * b` (the signature is every binary kernel's; mul has no alpha).
pub fn mul_f32(_alpha: f32, data: &[usize], shape: &[i64], strides: &[i64]) {
    binary_f32(|a, b| a * b, data, shape, strides);
}

/// `out = op(a, b)` over a TensorIterator's operands (`data` = out, a, b): `shape[0]` is the
/// fastest dimension, `strides` holds each operand's byte strides, operand by operand, so
/// broadcasting is a 0 stride.
fn binary_f32(op: impl Fn(f32, f32) -> f32, data: &[usize], shape: &[i64], strides: &[i64]) {
    let ndim = shape.len();
    let stride = |k: usize, d: usize| strides[k * ndim + d] as isize;
    let total: i64 = shape.iter().product();
    let mut index = vec![0i64; ndim];
    for _ in 0..total {
        // The byte offset of the current element in each operand.
        let at = |k: usize| (0..ndim).map(|d| index[d] as isize * stride(k, d)).sum::<isize>();
        // SAFETY: C++ passes TensorIterator's pointers and strides, which stay inside each
        // operand's storage for every index below `shape`.
        unsafe {
            let (a, b) = (*((data[1] as isize + at(1)) as *const f32), *((data[2] as isize + at(2)) as *const f32));
            *((data[0] as isize + at(0)) as *mut f32) = op(a, b);
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
}
// ANCHOR_END: binary
