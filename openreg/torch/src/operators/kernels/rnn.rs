//! The fused cells behind `nn.LSTM` and `nn.GRU` on an accelerator: `_thnn_fused_lstm_cell`,
//! `_thnn_fused_gru_cell` and their backwards. PyTorch multiplies the gates itself (two
//! `linear`s per step); a cell adds the two gate rows and the biases, applies the
//! nonlinearities and keeps what backward needs in a workspace. The workspace is opaque to
//! PyTorch (only our backward reads it); it is laid out as CUDA's is.
//!
//! Every operand is a contiguous float32, float16 or bfloat16 tensor; a row of the batch is
//! converted to float32, computed and stored back.

use openreg_runtime as rt;

use super::dtype::{self, Dtype};
use super::math::{sigmoid, tanh};
use super::thread_pool;
use super::{launch, dense};
use crate::error::Result;
use crate::ffi::ffi::{Cell, Dense};

/// Launches a fused recurrent cell; `operands` in [`layout`]'s order, outputs first, an
/// absent input (a bias, or a gradient that did not reach the cell) with address 0. False,
/// having done nothing, if a dtype is not float32, float16 or bfloat16.
pub(crate) fn launch_rnn_cell(op: Cell, operands: &[Dense], batch: i64, hidden: i64, device: i64) -> Result<bool> {
    let (layout, outputs) = layout(op);
    let (batch, hidden) = (batch.max(0) as usize, hidden.max(0) as usize);
    if operands.len() != layout.len() {
        return Err(rt::Error::InvalidValue(format!("{op:?} takes {} operands, got {}", layout.len(), operands.len())).into());
    }
    let mut slots = Vec::with_capacity(operands.len());
    for (k, (t, &(width, per_row))) in operands.iter().zip(layout).enumerate() {
        let numel = width * hidden * if per_row { batch } else { 1 };
        if t.data == 0 && k >= outputs && t.numel == 0 {
            slots.push((0, Dtype::Float)); // absent: read as zeros
            continue;
        }
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != numel {
            return Err(rt::Error::InvalidValue(format!("{op:?} operand {k} has {} elements, {numel} expected", t.numel)).into());
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    if batch * hidden == 0 {
        return Ok(true);
    }
    let work = RnnCell { op, slots, batch, hidden };
    launch(device, batch * hidden * 4, move || work.run())?;
    Ok(true)
}

/// One operand: runtime address (0: absent, read as zeros) and dtype.
pub(crate) type Slot = (usize, Dtype);

// ANCHOR: layout
/// The operands of `op`, outputs first: each one's width in units of the hidden size, and
/// whether it has a row per sample (a bias has one row for all).
pub(crate) fn layout(op: Cell) -> (&'static [(usize, bool)], usize) {
    const ROW: bool = true;
    match op {
        // hy, cy, workspace [i f g o] | input_gates, hidden_gates, cx, input_bias, hidden_bias
        Cell::LstmForward => (&[(1, ROW), (1, ROW), (4, ROW), (4, ROW), (4, ROW), (1, ROW), (4, !ROW), (4, !ROW)], 3),
        // grad_gates, grad_cx | grad_hy, grad_cy, cx, cy, workspace
        Cell::LstmBackward => (&[(4, ROW), (1, ROW), (1, ROW), (1, ROW), (1, ROW), (1, ROW), (4, ROW)], 2),
        // hy, workspace [r z n hn hx] | input_gates, hidden_gates, hx, input_bias, hidden_bias
        Cell::GruForward => (&[(1, ROW), (5, ROW), (3, ROW), (3, ROW), (1, ROW), (3, !ROW), (3, !ROW)], 2),
        // grad_input_gates, grad_hidden_gates, grad_hx | grad_hy, workspace
        Cell::GruBackward => (&[(3, ROW), (3, ROW), (1, ROW), (1, ROW), (5, ROW)], 3),
        _ => (&[], 0),
    }
}
// ANCHOR_END: layout

// ANCHOR: lstm
/// One row of the batch: `out` the outputs, `x` the inputs, in [`layout`]'s order. The gates
/// are `[i f g o]` blocks of `h`; each loop runs over slices, so it vectorises (math.rs).
#[inline(always)]
fn lstm_forward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [hy, cy, ws] = out else { return };
    let [ig, hg, cx, ib, hb] = x else { return };
    for (((w, &a), &b), (&c, &d)) in ws.iter_mut().zip(ig).zip(hg).zip(ib.iter().zip(hb)) {
        *w = a + b + c + d;
    }
    let (i, rest) = ws.split_at_mut(h);
    let (f, rest) = rest.split_at_mut(h);
    let (g, o) = rest.split_at_mut(h);
    for ((((i, f), g), o), ((cy, hy), &cx)) in
        i.iter_mut().zip(f.iter_mut()).zip(g.iter_mut()).zip(o.iter_mut()).zip(cy.iter_mut().zip(hy.iter_mut()).zip(cx))
    {
        (*i, *f, *g, *o) = (sigmoid(*i), sigmoid(*f), tanh(*g), sigmoid(*o));
        *cy = *f * cx + *i * *g;
        *hy = *o * tanh(*cy);
    }
}

#[inline(always)]
fn lstm_backward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [grad_gates, grad_cx] = out else { return };
    let [grad_hy, grad_cy, cx, cy, ws] = x else { return };
    let (gi, rest) = grad_gates.split_at_mut(h);
    let (gf, rest) = rest.split_at_mut(h);
    let (gg, go) = rest.split_at_mut(h);
    let (i, rest) = ws.split_at(h);
    let (f, rest) = rest.split_at(h);
    let (g, o) = rest.split_at(h);
    for j in 0..h {
        let (i, f, g, o) = (i[j], f[j], g[j], o[j]);
        let t = tanh(cy[j]);
        // The gradient reaching the cell state: through hy = o * tanh(cy), and directly.
        let grad_c = grad_hy[j] * o * (1.0 - t * t) + grad_cy[j];
        gi[j] = grad_c * g * i * (1.0 - i);
        gf[j] = grad_c * cx[j] * f * (1.0 - f);
        gg[j] = grad_c * i * (1.0 - g * g);
        go[j] = grad_hy[j] * t * o * (1.0 - o);
        grad_cx[j] = grad_c * f;
    }
}
// ANCHOR_END: lstm

#[inline(always)]
fn gru_forward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [hy, ws] = out else { return };
    let [ig, hg, hx, ib, hb] = x else { return };
    for j in 0..h {
        let r = sigmoid(ig[j] + ib[j] + hg[j] + hb[j]);
        let z = sigmoid(ig[h + j] + ib[h + j] + hg[h + j] + hb[h + j]);
        let hn = hg[2 * h + j] + hb[2 * h + j];
        let n = tanh(ig[2 * h + j] + ib[2 * h + j] + r * hn);
        hy[j] = n + z * (hx[j] - n);
        (ws[j], ws[h + j], ws[2 * h + j], ws[3 * h + j], ws[4 * h + j]) = (r, z, n, hn, hx[j]);
    }
}

#[inline(always)]
fn gru_backward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [grad_ig, grad_hg, grad_hx] = out else { return };
    let [grad_hy, ws] = x else { return };
    for j in 0..h {
        let (r, z, n, hn, hx) = (ws[j], ws[h + j], ws[2 * h + j], ws[3 * h + j], ws[4 * h + j]);
        let g = grad_hy[j];
        let grad_z = g * (hx - n) * z * (1.0 - z);
        let grad_n = g * (1.0 - z) * (1.0 - n * n);
        let grad_r = grad_n * hn * r * (1.0 - r);
        (grad_ig[j], grad_ig[h + j], grad_ig[2 * h + j]) = (grad_r, grad_z, grad_n);
        (grad_hg[j], grad_hg[h + j], grad_hg[2 * h + j]) = (grad_r, grad_z, grad_n * r);
        grad_hx[j] = g * z;
    }
}

/// One row of `op`, compiled for the widest SIMD the CPU has.
fn step(op: Cell, h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { step_avx512(op, h, out, x) },
            Simd::Avx2 => return unsafe { step_avx2(op, h, out, x) },
            Simd::Baseline => {}
        }
    }
    step_any(op, h, out, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn step_avx512(op: Cell, h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    step_any(op, h, out, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn step_avx2(op: Cell, h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    step_any(op, h, out, x)
}

#[inline(always)]
fn step_any(op: Cell, h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    match op {
        Cell::LstmForward => lstm_forward(h, out, x),
        Cell::LstmBackward => lstm_backward(h, out, x),
        Cell::GruForward => gru_forward(h, out, x),
        _ => gru_backward(h, out, x),
    }
}

/// A cell over `batch` rows of `hidden` units; `slots` in [`layout`]'s order.
#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct RnnCell {
    pub op: Cell,
    pub slots: Vec<Slot>,
    pub batch: usize,
    pub hidden: usize,
}

/// Rows per parallel part: below this much work, threads cost more than they save.
const ROWS_PER_PART: usize = 1 << 14;

impl RnnCell {
    pub(crate) fn run(&self) {
        let (layout, outputs) = layout(self.op);
        let h = self.hidden;
        let parts = thread_pool::threads().min((self.batch * h * 4).div_ceil(ROWS_PER_PART)).max(1);
        thread_pool::run(parts, |p| {
            let mut rows: Vec<Vec<f32>> = layout.iter().map(|&(w, _)| vec![0.0; w * h]).collect();
            for b in thread_pool::share(p, parts, self.batch) {
                // The row's address; 0 stays 0 (an absent operand).
                let at = |k: usize| {
                    let ((ptr, dtype), (w, per_row)) = (self.slots[k], layout[k]);
                    (if ptr != 0 && per_row { ptr + b * w * h * dtype.size() } else { ptr }, dtype)
                };
                for k in outputs..layout.len() {
                    let (ptr, dtype) = at(k);
                    // SAFETY: the launch checked each operand's size against the layout.
                    match ptr {
                        0 => rows[k].fill(0.0),
                        _ => unsafe { dtype::load(dtype, ptr as *const u8, dtype.size() as isize, &mut rows[k]) },
                    }
                }
                let (out, x) = rows.split_at_mut(outputs);
                step(self.op, h, out, x);
                for (k, row) in out.iter().enumerate() {
                    let (ptr, dtype) = at(k);
                    // SAFETY: as above; parts write disjoint rows.
                    unsafe { dtype::store(dtype, ptr as *mut u8, dtype.size() as isize, row) };
                }
            }
        });
    }
}
