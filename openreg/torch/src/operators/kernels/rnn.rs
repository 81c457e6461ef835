//! The fused cells behind `nn.LSTM` and `nn.GRU` on an accelerator: `_thnn_fused_lstm_cell`,
//! `_thnn_fused_gru_cell` and their backwards. PyTorch multiplies the gates itself (two
//! `linear`s per step); a cell adds the two gate rows and the biases, applies the
//! nonlinearities and keeps what backward needs in a workspace. The workspace is opaque to
//! PyTorch (only our backward reads it); it is laid out as CUDA's is.
//!
//! Every operand is a contiguous float32, float16 or bfloat16 tensor; a row of the batch is
//! converted to float32, computed and stored back.

use super::dtype::{self, Dtype};
use super::pool;
use crate::ffi::ffi::Cell;

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

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

// ANCHOR: lstm
/// One row of the batch: `out` the outputs, `x` the inputs, in [`layout`]'s order.
fn lstm_forward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [hy, cy, ws] = out else { return };
    let [ig, hg, cx, ib, hb] = x else { return };
    let gate = |k: usize, j: usize| ig[k * h + j] + hg[k * h + j] + ib[k * h + j] + hb[k * h + j];
    for j in 0..h {
        let (i, f, g, o) = (sigmoid(gate(0, j)), sigmoid(gate(1, j)), gate(2, j).tanh(), sigmoid(gate(3, j)));
        cy[j] = f * cx[j] + i * g;
        hy[j] = o * cy[j].tanh();
        (ws[j], ws[h + j], ws[2 * h + j], ws[3 * h + j]) = (i, f, g, o);
    }
}

fn lstm_backward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [grad_gates, grad_cx] = out else { return };
    let [grad_hy, grad_cy, cx, cy, ws] = x else { return };
    for j in 0..h {
        let (i, f, g, o) = (ws[j], ws[h + j], ws[2 * h + j], ws[3 * h + j]);
        let t = cy[j].tanh();
        // The gradient reaching the cell state: through hy = o * tanh(cy), and directly.
        let grad_c = grad_hy[j] * o * (1.0 - t * t) + grad_cy[j];
        grad_gates[j] = grad_c * g * i * (1.0 - i);
        grad_gates[h + j] = grad_c * cx[j] * f * (1.0 - f);
        grad_gates[2 * h + j] = grad_c * i * (1.0 - g * g);
        grad_gates[3 * h + j] = grad_hy[j] * t * o * (1.0 - o);
        grad_cx[j] = grad_c * f;
    }
}
// ANCHOR_END: lstm

fn gru_forward(h: usize, out: &mut [Vec<f32>], x: &[Vec<f32>]) {
    let [hy, ws] = out else { return };
    let [ig, hg, hx, ib, hb] = x else { return };
    for j in 0..h {
        let r = sigmoid(ig[j] + ib[j] + hg[j] + hb[j]);
        let z = sigmoid(ig[h + j] + ib[h + j] + hg[h + j] + hb[h + j]);
        let hn = hg[2 * h + j] + hb[2 * h + j];
        let n = (ig[2 * h + j] + ib[2 * h + j] + r * hn).tanh();
        hy[j] = n + z * (hx[j] - n);
        (ws[j], ws[h + j], ws[2 * h + j], ws[3 * h + j], ws[4 * h + j]) = (r, z, n, hn, hx[j]);
    }
}

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
        let step: fn(usize, &mut [Vec<f32>], &[Vec<f32>]) = match self.op {
            Cell::LstmForward => lstm_forward,
            Cell::LstmBackward => lstm_backward,
            Cell::GruForward => gru_forward,
            _ => gru_backward,
        };
        let parts = pool::threads().min((self.batch * h * 4).div_ceil(ROWS_PER_PART)).max(1);
        pool::run(parts, |p| {
            let mut rows: Vec<Vec<f32>> = layout.iter().map(|&(w, _)| vec![0.0; w * h]).collect();
            for b in (p..self.batch).step_by(parts) {
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
                step(h, out, x);
                for (k, row) in out.iter().enumerate() {
                    let (ptr, dtype) = at(k);
                    // SAFETY: as above; parts write disjoint rows.
                    unsafe { dtype::store(dtype, ptr as *mut u8, dtype.size() as isize, row) };
                }
            }
        });
    }
}
