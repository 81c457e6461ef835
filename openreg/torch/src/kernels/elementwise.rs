//! Elementwise kernels over a TensorIterator's operands: output first, then the inputs, each
//! with its own dtype and byte strides (broadcasting is a 0 stride). Each run along the fastest
//! dimension is converted to float32 in blocks, computed, and converted back; float32
//! contiguous runs are read and written in place.

use rayon::prelude::*;

use super::dtype::{self, Dtype};
use super::walk::Layout;
use crate::ffi::ffi::Pointwise;

/// Elements converted and computed at a time (the float32 buffers stay in L1).
const BLOCK: usize = 512;
/// Elements per parallel task.
const CHUNK: usize = 1 << 16;

/// Where an input's elements come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// Device memory (a runtime-view address) in `dtype`.
    Memory { base: usize, dtype: Dtype },
    /// One value for every element: a CPU scalar such as the `2` in `x + 2`.
    Constant(f32),
}

/// One elementwise operation, ready to run on a stream's worker.
pub(crate) struct Elementwise {
    pub op: Pointwise,
    pub scalar: f32,
    pub out: (usize, Dtype),
    pub inputs: Vec<Source>,
    pub layout: Layout,
}

/// How many inputs `op` reads.
pub(crate) fn arity(op: Pointwise) -> Option<usize> {
    Some(match op {
        Pointwise::Fill => 0,
        Pointwise::Copy
        | Pointwise::Neg
        | Pointwise::Abs
        | Pointwise::Exp
        | Pointwise::Relu
        | Pointwise::Sigmoid
        | Pointwise::Tanh => 1,
        Pointwise::Add
        | Pointwise::Mul
        | Pointwise::Div
        | Pointwise::Maximum
        | Pointwise::Minimum
        | Pointwise::ThresholdBackward => 2,
        _ => return None,
    })
}

impl Elementwise {
    /// Runs the whole operation, in parallel chunks when it is large.
    pub(crate) fn run(&self) {
        let n = self.layout.numel();
        if n <= CHUNK {
            return self.run_range(0, n);
        }
        (0..n.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
            let start = c * CHUNK;
            self.run_range(start, CHUNK.min(n - start));
        });
    }

    fn run_range(&self, start: usize, count: usize) {
        let mut a = [0f32; BLOCK];
        let mut b = [0f32; BLOCK];
        let mut o = [0f32; BLOCK];
        // Constants are loaded once.
        for (k, buf) in [&mut a, &mut b].into_iter().enumerate() {
            if let Some(Source::Constant(v)) = self.inputs.get(k) {
                buf.fill(*v);
            }
        }
        self.layout.walk(start, count, |offsets, len| {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(BLOCK);
                let at = |k: usize| offsets[k] + (done as isize) * self.layout.strides[0][k];
                // SAFETY: C++ checked every operand's extent against its live allocation.
                unsafe { self.block(&at, n, &mut a, &mut b, &mut o) };
                done += n;
            }
        });
    }

    /// Computes `n` elements whose operand byte offsets are `at(k)`. A float32 operand with
    /// unit stride is used where it lies; any other goes through a float32 buffer.
    unsafe fn block(&self, at: &dyn Fn(usize) -> isize, n: usize, a: &mut [f32; BLOCK], b: &mut [f32; BLOCK], o: &mut [f32; BLOCK]) {
        let stride = |k: usize| self.layout.strides[0][k];
        let mut ins = [a.as_ptr(), b.as_ptr()];
        for (k, buf) in [&mut *a, &mut *b].into_iter().enumerate() {
            if let Some(Source::Memory { base, dtype }) = self.inputs.get(k) {
                let src = (*base as isize + at(k + 1)) as *const u8;
                if *dtype == Dtype::Float && stride(k + 1) == 4 {
                    ins[k] = src.cast();
                } else {
                    unsafe { dtype::load(*dtype, src, stride(k + 1), &mut buf[..n]) };
                }
            }
        }
        let (base, dtype) = self.out;
        let dst = (base as isize + at(0)) as *mut u8;
        if dtype == Dtype::Float && stride(0) == 4 {
            unsafe { compute(self.op, self.scalar, ins[0], ins[1], dst.cast(), n) };
        } else {
            unsafe {
                compute(self.op, self.scalar, ins[0], ins[1], o.as_mut_ptr(), n);
                dtype::store(dtype, dst, stride(0), &o[..n]);
            }
        }
    }
}

// ANCHOR: compute
/// The arithmetic on `n` float32 values; `x` is alpha for add, the threshold for
/// threshold_backward and the value for fill. NaN propagates through maximum and minimum.
/// Raw pointers, because an in-place operation's output is one of its inputs.
///
/// # Safety
/// `a`, `b` (as far as the operation reads them) and `o` must be valid for `n` elements.
unsafe fn compute(op: Pointwise, x: f32, a: *const f32, b: *const f32, o: *mut f32, n: usize) {
    unsafe {
        let unary = |f: fn(f32) -> f32| (0..n).for_each(|i| *o.add(i) = f(*a.add(i)));
        let binary = |f: fn(f32, f32, f32) -> f32| (0..n).for_each(|i| *o.add(i) = f(*a.add(i), *b.add(i), x));
        match op {
            Pointwise::Fill => (0..n).for_each(|i| *o.add(i) = x),
            Pointwise::Copy => unary(|a| a),
            Pointwise::Neg => unary(|a| -a),
            Pointwise::Abs => unary(f32::abs),
            Pointwise::Exp => unary(f32::exp),
            Pointwise::Relu => unary(|a| if a > 0.0 || a.is_nan() { a } else { 0.0 }),
            Pointwise::Sigmoid => unary(|a| 1.0 / (1.0 + (-a).exp())),
            Pointwise::Tanh => unary(f32::tanh),
            Pointwise::Add if x == 1.0 => binary(|a, b, _| a + b),
            Pointwise::Add => binary(|a, b, x| a + x * b),
            Pointwise::Mul => binary(|a, b, _| a * b),
            Pointwise::Div => binary(|a, b, _| a / b),
            Pointwise::Maximum => binary(|a, b, _| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }),
            Pointwise::Minimum => binary(|a, b, _| if a.is_nan() || b.is_nan() { f32::NAN } else { a.min(b) }),
            // threshold_backward's iterator lists `self` before `grad`: the gradient where
            // self > threshold.
            Pointwise::ThresholdBackward => binary(|s, grad, x| if s <= x { 0.0 } else { grad }),
            _ => {} // arity() admits only the operations above
        }
    }
}
// ANCHOR_END: compute
