//! A whole LSTM layer (one direction) in one launch, forward and backward: what cuDNN and
//! oneDNN give CUDA and CPU. PyTorch's generic path runs two matrix products and a fused cell
//! per time step and records each in autograd; here the input's products for every step are
//! one product, and only `h @ w_hh` stays inside the loop over time. Backward walks the steps
//! in reverse for the gates' gradients, then forms the weights' and input's gradients as three
//! products over all steps.
//!
//! Every operand is a contiguous float32 tensor; time is the outer dimension (`[time, batch, …]`).

use openreg_runtime as rt;

use super::dtype::Dtype;
use super::math::{sigmoid, tanh};
use super::matmul::{View, gemm_f32};
use super::{launch, dense};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, LstmShape};

/// Launches a whole LSTM layer, forward or backward; `operands` in [`FORWARD`]'s or
/// [`BACKWARD`]'s order, each checked to be float32 of the size `shape` gives it. An
/// absent input (no bias, no initial state, a gradient that did not reach an output) has
/// address 0 and reads as zeros; outputs and the saved tensors must be present.
pub(crate) fn launch_lstm_layer(backward: bool, shape: LstmShape, operands: &[Dense], device: i64) -> Result<()> {
    let [time, batch, input, hidden] = [shape.time, shape.batch, shape.input, shape.hidden].map(|v| v.max(0) as usize);
    let shape = Shape { time, batch, input, hidden, reverse: shape.reverse };
    let (names, optional): (&[&str], &[&str]) = if backward {
        (&BACKWARD, &["grad_input", "grad_output", "grad_hy", "grad_cy", "hx", "cx"])
    } else {
        (&FORWARD, &["b_ih", "b_hh", "hx", "cx"])
    };
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("LSTM layer: {what}")));
    if operands.len() != names.len() {
        return Err(invalid(format!("{} operands expected, got {}", names.len(), operands.len())));
    }
    if time * batch * hidden == 0 {
        return Err(invalid(format!("empty sequence, batch or hidden size: {shape:?}")));
    }
    let mut at = Vec::with_capacity(names.len());
    for ((t, name), numel) in operands.iter().zip(names).zip(shape.numels(backward)) {
        if t.data == 0 && t.numel == 0 && optional.contains(name) {
            at.push(0);
            continue;
        }
        if Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != numel {
            return Err(invalid(format!("{name} must be {numel} float32 elements, got {} of dtype code {}", t.numel, t.dtype)));
        }
        at.push(dense(t, Dtype::Float)?);
    }
    let work = Layer { shape, backward, at };
    launch(device, time * batch * hidden * 4 * (input + hidden), move || work.run())
}

/// The operands' roles, in the order C++ passes them (outputs first). `workspace` holds each
/// step's activated gates `[i f g o]` (`[time, batch, 4 * hidden]`), then each step's cell
/// state (`[time, batch, hidden]`).
pub(crate) const FORWARD: [&str; 11] =
    ["output", "hy", "cy", "workspace", "input", "w_ih", "w_hh", "b_ih", "b_hh", "hx", "cx"];
pub(crate) const BACKWARD: [&str; 16] = [
    "grad_input", "grad_w_ih", "grad_w_hh", "grad_bias", "grad_hx", "grad_cx",
    "grad_output", "grad_hy", "grad_cy", "input", "w_ih", "w_hh", "hx", "cx", "output", "workspace",
];

/// `[time, batch, input, hidden]`, and whether the layer runs from the last step to the first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub time: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub reverse: bool,
}

impl Shape {
    /// The element count of each operand, in [`FORWARD`]'s or [`BACKWARD`]'s order.
    pub(crate) fn numels(&self, backward: bool) -> Vec<usize> {
        let Shape { time: t, batch: b, input: i, hidden: h, .. } = *self;
        if backward {
            vec![t * b * i, 4 * h * i, 4 * h * h, 4 * h, b * h, b * h, t * b * h, b * h, b * h, t * b * i, 4 * h * i, 4 * h * h, b * h, b * h, t * b * h, t * b * 5 * h]
        } else {
            vec![t * b * h, b * h, b * h, t * b * 5 * h, t * b * i, 4 * h * i, 4 * h * h, 4 * h, 4 * h, b * h, b * h]
        }
    }

    /// The time index of the `s`-th step the layer runs.
    fn step(&self, s: usize) -> usize {
        if self.reverse { self.time - 1 - s } else { s }
    }
}

/// A launch: the shape and the operands' runtime addresses (0: absent, read as zeros).
#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Layer {
    pub shape: Shape,
    pub backward: bool,
    pub at: Vec<usize>,
}

/// A row-major float32 matrix at `ptr` with `cols` columns; `.t()` is its transpose.
fn rows(ptr: usize, cols: usize) -> View {
    View { ptr, rs: cols as isize, cs: 1 }
}

fn transposed(v: View) -> View {
    View { ptr: v.ptr, rs: v.cs, cs: v.rs }
}

/// The `len` floats at `ptr + offset` floats, to write; [`values`] to read.
///
/// # Safety
/// The launch checked every operand's length against [`Shape::numels`].
unsafe fn floats<'a>(ptr: usize, offset: usize, len: usize) -> &'a mut [f32] {
    unsafe { std::slice::from_raw_parts_mut((ptr as *mut f32).add(offset), len) }
}

unsafe fn values<'a>(ptr: usize, offset: usize, len: usize) -> &'a [f32] {
    unsafe { std::slice::from_raw_parts((ptr as *const f32).add(offset), len) }
}

impl Layer {
    pub(crate) fn run(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use super::softmax::{Simd, simd};
            // SAFETY: the CPU has the features (simd() asked it).
            match simd() {
                Simd::Avx512 => return unsafe { self.run_avx512() },
                Simd::Avx2 => return unsafe { self.run_avx2() },
                Simd::Baseline => {}
            }
        }
        self.run_any()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(&self) {
        self.run_any()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self) {
        self.run_any()
    }

    #[inline(always)]
    fn run_any(&self) {
        // SAFETY: the launch checked the operands (lengths, one storage each, outputs apart
        // from inputs).
        unsafe {
            if self.backward { self.backward() } else { self.forward() }
        }
    }

    // ANCHOR: forward
    #[inline(always)]
    unsafe fn forward(&self) {
        let Shape { time, batch, input, hidden: h, .. } = self.shape;
        let [output, hy, cy, workspace, x, w_ih, w_hh, b_ih, b_hh, hx, cx] = self.at[..] else { return };
        let (gates, cells) = (workspace, workspace + time * batch * 4 * h * 4);
        // Every step's input product at once: gates = x @ w_ih^T, [time * batch, 4h].
        unsafe { gemm_f32(time * batch, 4 * h, input, rows(gates, 4 * h), false, rows(x, input), transposed(rows(w_ih, input))) };
        let mut bias = vec![0.0f32; 4 * h];
        for b in [b_ih, b_hh].into_iter().filter(|&b| b != 0) {
            bias.iter_mut().zip(unsafe { values(b, 0, 4 * h) }).for_each(|(s, &v)| *s += v);
        }
        let zeros = vec![0.0f32; batch * h];
        let (mut h_prev, mut c_prev) = (hx, cx);
        for s in 0..self.shape.time {
            let t = self.shape.step(s);
            let g = gates + t * batch * 4 * h * 4;
            if h_prev != 0 {
                unsafe { gemm_f32(batch, 4 * h, h, rows(g, 4 * h), true, rows(h_prev, h), transposed(rows(w_hh, h))) };
            }
            let c_in = if c_prev == 0 { &zeros[..] } else { unsafe { values(c_prev, 0, batch * h) } };
            let (c_out, h_out) = unsafe { (floats(cells, t * batch * h, batch * h), floats(output, t * batch * h, batch * h)) };
            for r in 0..batch {
                let row = unsafe { floats(g, r * 4 * h, 4 * h) };
                let range = r * h..(r + 1) * h;
                cell(h, row, &bias, &c_in[range.clone()], &mut c_out[range.clone()], &mut h_out[range]);
            }
            (h_prev, c_prev) = (output + t * batch * h * 4, cells + t * batch * h * 4);
        }
        let last = self.shape.step(time - 1);
        unsafe {
            floats(hy, 0, batch * h).copy_from_slice(values(output, last * batch * h, batch * h));
            floats(cy, 0, batch * h).copy_from_slice(values(cells, last * batch * h, batch * h));
        }
    }
    // ANCHOR_END: forward

    // ANCHOR: backward
    #[inline(always)]
    unsafe fn backward(&self) {
        let Shape { time, batch, input, hidden: h, .. } = self.shape;
        let [grad_x, grad_w_ih, grad_w_hh, grad_bias, grad_hx, grad_cx, grad_output, grad_hy, grad_cy, x, w_ih, w_hh, hx, cx, output, workspace] =
            self.at[..]
        else {
            return;
        };
        let (gates, cells) = (workspace, workspace + time * batch * 4 * h * 4);
        let n = batch * h;
        let read = |ptr: usize, offset: usize| -> Vec<f32> {
            if ptr == 0 { vec![0.0; n] } else { unsafe { values(ptr, offset, n) }.to_vec() }
        };
        // The gradient of each step's gates before the nonlinearities, [time * batch, 4h].
        let mut grad_gates = vec![0.0f32; time * batch * 4 * h];
        let (mut grad_h, mut grad_c) = (read(grad_hy, 0), read(grad_cy, 0));
        let mut grad_c_prev = vec![0.0f32; n];
        for s in (0..time).rev() {
            let t = self.shape.step(s);
            if grad_output != 0 {
                grad_h.iter_mut().zip(unsafe { values(grad_output, t * n, n) }).for_each(|(g, &d)| *g += d);
            }
            let c_prev = if s == 0 { read(cx, 0) } else { unsafe { values(cells, self.shape.step(s - 1) * n, n) }.to_vec() };
            let c = unsafe { values(cells, t * n, n) };
            for r in 0..batch {
                let range = r * h..(r + 1) * h;
                let g = unsafe { values(gates, (t * batch + r) * 4 * h, 4 * h) };
                cell_backward(
                    h, g, &c[range.clone()], &c_prev[range.clone()], &grad_h[range.clone()], &grad_c[range.clone()],
                    &mut grad_c_prev[range], &mut grad_gates[(t * batch + r) * 4 * h..(t * batch + r + 1) * 4 * h],
                );
            }
            std::mem::swap(&mut grad_c, &mut grad_c_prev);
            // What reaches the previous step's h: grad_gates[t] @ w_hh, [batch, h].
            let dg = grad_gates.as_ptr() as usize + t * batch * 4 * h * 4;
            unsafe { gemm_f32(batch, h, 4 * h, rows(grad_h.as_mut_ptr() as usize, h), false, rows(dg, 4 * h), rows(w_hh, h)) };
        }
        unsafe {
            floats(grad_hx, 0, n).copy_from_slice(&grad_h);
            floats(grad_cx, 0, n).copy_from_slice(&grad_c);
        }
        let dg = grad_gates.as_ptr() as usize;
        let all = time * batch;
        // Over every step at once: grad_w_ih = grad_gates^T @ x, grad_input = grad_gates @ w_ih (if
        // asked for).
        unsafe {
            gemm_f32(4 * h, input, all, rows(grad_w_ih, input), false, transposed(rows(dg, 4 * h)), rows(x, input));
            if grad_x != 0 {
                gemm_f32(all, input, 4 * h, rows(grad_x, input), false, rows(dg, 4 * h), rows(w_ih, input));
            }
        }
        // grad_w_hh = sum over steps of grad_gates[t]^T @ h_prev(t): h_prev is the output of the
        // step before, in one block, and hx for the first step the layer ran.
        let first = self.shape.step(0);
        let (later, earlier) = if self.shape.reverse { (0, 1) } else { (1, 0) };
        let block = (time - 1) * batch;
        unsafe {
            gemm_f32(4 * h, h, block, rows(grad_w_hh, h), false, transposed(rows(dg + later * batch * 4 * h * 4, 4 * h)), rows(output + earlier * n * 4, h));
            let first_h = read(hx, 0);
            gemm_f32(4 * h, h, batch, rows(grad_w_hh, h), true, transposed(rows(dg + first * batch * 4 * h * 4, 4 * h)), rows(first_h.as_ptr() as usize, h));
        }
        let bias = unsafe { floats(grad_bias, 0, 4 * h) };
        bias.fill(0.0);
        for row in grad_gates.chunks_exact(4 * h) {
            bias.iter_mut().zip(row).for_each(|(b, &g)| *b += g);
        }
    }
    // ANCHOR_END: backward
}

/// One row of a step: `gates` holds `x @ w_ih^T + h @ w_hh^T` and leaves with the activated
/// `[i f g o]`; the new cell state and output go to `c` and `h_out`.
#[inline(always)]
fn cell(h: usize, gates: &mut [f32], bias: &[f32], c_prev: &[f32], c: &mut [f32], h_out: &mut [f32]) {
    // Slices of exactly h: the loops below then have no bounds checks.
    let (gates, c_prev, c, h_out) = (&mut gates[..4 * h], &c_prev[..h], &mut c[..h], &mut h_out[..h]);
    gates.iter_mut().zip(bias).for_each(|(g, &b)| *g += b);
    // One simple loop per nonlinearity: each becomes SIMD code (math.rs).
    let (ifg, o) = gates.split_at_mut(3 * h);
    let (i_f, g) = ifg.split_at_mut(2 * h);
    i_f.iter_mut().for_each(|v| *v = sigmoid(*v));
    o.iter_mut().for_each(|v| *v = sigmoid(*v));
    g.iter_mut().for_each(|v| *v = tanh(*v));
    let (i, f) = i_f.split_at(h);
    for ((c, &cp), ((&i, &f), &g)) in c.iter_mut().zip(c_prev).zip(i.iter().zip(f).zip(g.iter())) {
        *c = f * cp + i * g;
    }
    for ((h, &c), &o) in h_out.iter_mut().zip(c.iter()).zip(o.iter()) {
        *h = o * tanh(c);
    }
}

/// One row of a step backward: from the gradient reaching `h` and `c`, the gates' gradient
/// (before the nonlinearities) and the gradient reaching the previous cell state.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn cell_backward(
    h: usize, gates: &[f32], c: &[f32], c_prev: &[f32], grad_h: &[f32], grad_c: &[f32], grad_c_prev: &mut [f32],
    grad_gates: &mut [f32],
) {
    let (gates, grad_gates) = (&gates[..4 * h], &mut grad_gates[..4 * h]);
    let (c, c_prev, grad_h, grad_c, grad_c_prev) = (&c[..h], &c_prev[..h], &grad_h[..h], &grad_c[..h], &mut grad_c_prev[..h]);
    let (i, rest) = gates.split_at(h);
    let (f, rest) = rest.split_at(h);
    let (g, o) = rest.split_at(h);
    let (gi, rest) = grad_gates.split_at_mut(h);
    let (gf, rest) = rest.split_at_mut(h);
    let (gg, go) = rest.split_at_mut(h);
    for j in 0..h {
        let tc = tanh(c[j]);
        let dc = grad_c[j] + grad_h[j] * o[j] * (1.0 - tc * tc);
        gi[j] = dc * g[j] * i[j] * (1.0 - i[j]);
        gf[j] = dc * c_prev[j] * f[j] * (1.0 - f[j]);
        gg[j] = dc * i[j] * (1.0 - g[j] * g[j]);
        go[j] = grad_h[j] * tc * o[j] * (1.0 - o[j]);
        grad_c_prev[j] = dc * f[j];
    }
}
