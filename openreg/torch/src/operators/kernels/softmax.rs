//! Softmax and log-softmax, forward and backward, over contiguous operands seen as
//! `[outer, size, inner]`: the softmax runs along the middle dimension. Arithmetic in float32
//! (as PyTorch's CPU kernels do for all three dtypes), one pass for the maximum, one for the
//! sum of exponentials, one to write.

use super::dtype::{self, Dtype};
use super::elementwise::parallel_min;
use crate::ffi::ffi::Softmax;

/// Lanes (positions along `inner`) or row elements handled at a time.
const BLOCK: usize = 256;
/// Elements per parallel part, at least.
const PARALLEL: usize = 1 << 15;

/// An operand: runtime-view address and dtype.
pub(crate) type Operand = (usize, Dtype);

#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct SoftmaxKernel {
    pub op: Softmax,
    /// The result (output, or grad_input).
    pub out: Operand,
    /// Forward: `[input]`; backward: `[grad_output, output]`.
    pub inputs: Vec<Operand>,
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
}

impl SoftmaxKernel {
    /// Runs on as many threads as the work is worth; a unit is one `(outer, lane block)` pair.
    pub(crate) fn run(&self) {
        let blocks = self.inner.div_ceil(BLOCK);
        let units = self.outer * blocks;
        let per_unit = self.size * self.inner.min(BLOCK);
        parallel_min(units, (PARALLEL / per_unit.max(1)).max(1), |start, count| {
            for u in start..start + count {
                let (o, b) = (u / blocks, u % blocks);
                let lanes = b * BLOCK..(b * BLOCK + BLOCK).min(self.inner);
                // SAFETY: C++ checked each operand's `outer * size * inner` elements against
                // its live allocation; units write disjoint elements.
                unsafe { self.unit(o, lanes.start, lanes.len()) };
            }
        });
    }

    /// Address of element `(o, d, lane)` of operand `(base, dtype)`.
    fn at(&self, (base, dtype): Operand, o: usize, d: usize, lane: usize) -> *mut u8 {
        (base + ((o * self.size + d) * self.inner + lane) * dtype.size()) as *mut u8
    }

    unsafe fn load(&self, x: Operand, o: usize, d: usize, lane: usize, buf: &mut [f32]) {
        unsafe { dtype::load(x.1, self.at(x, o, d, lane), x.1.size() as isize, buf) }
    }

    unsafe fn store(&self, o: usize, d: usize, lane: usize, values: &[f32]) {
        unsafe { dtype::store(self.out.1, self.at(self.out, o, d, lane), self.out.1.size() as isize, values) }
    }

    /// Lanes `lane..lane + n` of outer index `o`: every step along `size` reads `n` neighbours.
    /// When `inner` is 1 a lane is a whole row, read `BLOCK` elements at a time instead.
    unsafe fn unit(&self, o: usize, lane: usize, n: usize) {
        if self.inner == 1 {
            return unsafe { self.row(o) };
        }
        let (mut acc, mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
        let (acc, x, y) = (&mut acc[..n], &mut x[..n], &mut y[..n]);
        let backward = matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward);
        unsafe {
            if backward {
                // acc = sum over d of grad (log-softmax) or grad * output (softmax).
                acc.fill(0.0);
                for d in 0..self.size {
                    self.load(self.inputs[0], o, d, lane, x);
                    self.load(self.inputs[1], o, d, lane, y);
                    for i in 0..n {
                        acc[i] += if self.op == Softmax::SoftmaxBackward { x[i] * y[i] } else { x[i] };
                    }
                }
                for d in 0..self.size {
                    self.load(self.inputs[0], o, d, lane, x);
                    self.load(self.inputs[1], o, d, lane, y);
                    for i in 0..n {
                        x[i] = backward_value(self.op, x[i], y[i], acc[i]);
                    }
                    self.store(o, d, lane, x);
                }
                return;
            }
            let mut max = [f32::NEG_INFINITY; BLOCK];
            let max = &mut max[..n];
            for d in 0..self.size {
                self.load(self.inputs[0], o, d, lane, x);
                for i in 0..n {
                    max[i] = nan_max(max[i], x[i]);
                }
            }
            acc.fill(0.0);
            for d in 0..self.size {
                self.load(self.inputs[0], o, d, lane, x);
                for i in 0..n {
                    acc[i] += (x[i] - max[i]).exp();
                }
            }
            for d in 0..self.size {
                self.load(self.inputs[0], o, d, lane, x);
                for i in 0..n {
                    x[i] = forward_value(self.op, x[i], max[i], acc[i]);
                }
                self.store(o, d, lane, x);
            }
        }
    }

    /// One contiguous row (`inner == 1`), in blocks along it.
    unsafe fn row(&self, o: usize) {
        let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
        let blocks = (0..self.size).step_by(BLOCK).map(|d| (d, (self.size - d).min(BLOCK)));
        let backward = matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward);
        unsafe {
            if backward {
                let mut sum = 0f32;
                for (d, n) in blocks.clone() {
                    self.load(self.inputs[0], o, d, 0, &mut x[..n]);
                    if self.op == Softmax::SoftmaxBackward {
                        self.load(self.inputs[1], o, d, 0, &mut y[..n]);
                        sum += x[..n].iter().zip(&y[..n]).map(|(g, y)| g * y).sum::<f32>();
                    } else {
                        sum += x[..n].iter().sum::<f32>();
                    }
                }
                for (d, n) in blocks {
                    self.load(self.inputs[0], o, d, 0, &mut x[..n]);
                    self.load(self.inputs[1], o, d, 0, &mut y[..n]);
                    for i in 0..n {
                        x[i] = backward_value(self.op, x[i], y[i], sum);
                    }
                    self.store(o, d, 0, &x[..n]);
                }
                return;
            }
            let mut max = f32::NEG_INFINITY;
            for (d, n) in blocks.clone() {
                self.load(self.inputs[0], o, d, 0, &mut x[..n]);
                max = x[..n].iter().fold(max, |m, &v| nan_max(m, v));
            }
            let mut sum = 0f32;
            for (d, n) in blocks.clone() {
                self.load(self.inputs[0], o, d, 0, &mut x[..n]);
                sum += x[..n].iter().map(|v| (v - max).exp()).sum::<f32>();
            }
            for (d, n) in blocks {
                self.load(self.inputs[0], o, d, 0, &mut x[..n]);
                for v in &mut x[..n] {
                    *v = forward_value(self.op, *v, max, sum);
                }
                self.store(o, d, 0, &x[..n]);
            }
        }
    }
}

/// The larger of two values; NaN if either is (a NaN input makes its whole slice NaN, as on CPU).
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// softmax: `exp(x - max) / sum`; log-softmax: `x - max - ln(sum)`.
#[inline(always)]
fn forward_value(op: Softmax, x: f32, max: f32, sum: f32) -> f32 {
    if op == Softmax::LogSoftmax { x - max - sum.ln() } else { (x - max).exp() / sum }
}

/// From grad `g`, output `y` and the row's `sum`: softmax `y * (g - sum(g * y))`, log-softmax
/// `g - exp(y) * sum(g)`.
#[inline(always)]
fn backward_value(op: Softmax, g: f32, y: f32, sum: f32) -> f32 {
    if op == Softmax::LogSoftmaxBackward { g - y.exp() * sum } else { y * (g - sum) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: Softmax, outer: usize, size: usize, inner: usize, inputs: &[&[f32]]) -> Vec<f32> {
        let mut out = vec![0f32; outer * size * inner];
        let kernel = SoftmaxKernel {
            op,
            out: (out.as_mut_ptr() as usize, Dtype::Float),
            inputs: inputs.iter().map(|x| (x.as_ptr() as usize, Dtype::Float)).collect(),
            outer,
            size,
            inner,
        };
        kernel.run();
        out
    }

    /// Softmax along the middle dimension, the obvious way, in float64.
    fn reference(x: &[f32], outer: usize, size: usize, inner: usize) -> Vec<f64> {
        let mut out = vec![0f64; x.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |d: usize| (o * size + d) * inner + i;
                let max = (0..size).map(|d| f64::from(x[at(d)])).fold(f64::MIN, f64::max);
                let sum: f64 = (0..size).map(|d| (f64::from(x[at(d)]) - max).exp()).sum();
                for d in 0..size {
                    out[at(d)] = (f64::from(x[at(d)]) - max).exp() / sum;
                }
            }
        }
        out
    }

    #[test]
    fn matches_the_definition_along_rows_and_middle_dimensions() {
        // inner == 1 (rows, longer than a block), and inner > BLOCK (two lane blocks).
        for (outer, size, inner) in [(3, 700, 1), (2, 5, 300), (1, 1, 1)] {
            let x: Vec<f32> = (0..outer * size * inner).map(|i| ((i * 37 % 101) as f32) / 10.0 - 5.0).collect();
            let want = reference(&x, outer, size, inner);
            let soft = run(Softmax::Softmax, outer, size, inner, &[&x]);
            let log = run(Softmax::LogSoftmax, outer, size, inner, &[&x]);
            for i in 0..x.len() {
                assert!((f64::from(soft[i]) - want[i]).abs() < 1e-6, "softmax {i}");
                assert!((f64::from(log[i]) - want[i].ln()).abs() < 1e-4, "log_softmax {i}");
            }
            // d/dx of sum(w * softmax(x)) with w = 1 everywhere is 0.
            let ones = vec![1f32; x.len()];
            let grad = run(Softmax::SoftmaxBackward, outer, size, inner, &[&ones, &soft]);
            assert!(grad.iter().all(|g| g.abs() < 1e-5));
        }
    }

    #[test]
    fn a_nan_makes_its_slice_nan_only() {
        let x = [1.0, f32::NAN, 2.0, 3.0];
        let out = run(Softmax::LogSoftmax, 2, 2, 1, &[&x]);
        assert!(out[0].is_nan() && out[1].is_nan());
        assert!(out[2].is_finite() && out[3].is_finite());
    }
}
