//! Scaled dot-product attention, forward and backward, one query row at a time (the way a
//! flash-attention kernel walks it, without the tiling a GPU needs): the scores of a row, its
//! softmax and its log-sum-exp (kept for the backward), in float32 whatever the dtype. Query
//! heads that share a key/value head (grouped-query attention) are one unit of work, so the
//! key/value gradients of a group are summed without races.

use openreg_runtime as rt;

use super::dtype::{self, Dtype, write};
use super::math::{dot, exp};
#[cfg(target_arch = "x86_64")]
use super::softmax::{Simd, simd};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{AttentionShape, Dense};

/// Launches attention's forward or backward (`kernels/attention.rs`). Every float operand of
/// one dtype but the float32 log-sum-exp; the mask boolean or of the operands' dtype. False,
/// having done nothing, if a dtype is not ours.
pub(crate) fn launch_attention(backward: bool, shape: AttentionShape, operands: &[Dense], mask: Dense, device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("attention: {what}")));
    let s = &shape;
    let dims = [s.batch, s.heads, s.kv_heads, s.query_len, s.key_len, s.head_dim, s.value_dim];
    if dims.iter().any(|&v| v < 0) || s.kv_heads == 0 || s.heads % s.kv_heads != 0 || s.mask_strides.iter().any(|&v| v < 0) {
        return Err(invalid(format!("invalid shape {shape:?}")));
    }
    let [b, h, hkv, l, n, d, dv] = dims.map(|v| v as usize);
    let (q, k, v, o, lse) = (b * h * l * d, b * hkv * n * d, b * hkv * n * dv, b * h * l * dv, b * h * l);
    let sizes: &[usize] = if backward { &[q, k, v, o, q, k, v, o, lse] } else { &[o, lse, q, k, v] };
    // Inputs read at strides, as [batch, heads, rows, width]: which stride triple, and the shape.
    let strided = |i: usize| -> Option<(usize, [usize; 4])> {
        match (backward, i) {
            (false, 2) | (true, 4) => Some((0, [b, h, l, d])),
            (false, 3) | (true, 5) => Some((1, [b, hkv, n, d])),
            (false, 4) | (true, 6) => Some((2, [b, hkv, n, dv])),
            (true, 3) => Some((3, [b, h, l, dv])),
            (true, 7) => Some((4, [b, h, l, dv])),
            _ => None,
        }
    };
    let lse_at = if backward { 8 } else { 1 };
    if operands.len() != sizes.len() {
        return Err(invalid(format!("{} operands expected, got {}", sizes.len(), operands.len())));
    }
    let Some(dtype) = Dtype::from_code(operands[0].dtype) else { return Ok(false) };
    let mut slots = Vec::with_capacity(sizes.len());
    for (i, (t, &size)) in operands.iter().zip(sizes).enumerate() {
        let want = if i == lse_at { Dtype::Float } else { dtype };
        if !t.dtype_is(want) {
            return Ok(false);
        }
        if t.numel != size {
            return Err(invalid(format!("operand {i} has {} elements, {size} expected", t.numel)));
        }
        let extent = match strided(i) {
            // The last element the strides reach, plus one.
            Some((which, shape)) if size > 0 => {
                let st = &s.input_strides[which * 3..which * 3 + 3];
                if st.iter().any(|&v| v < 0) {
                    return Err(invalid(format!("negative strides {st:?}")));
                }
                shape[..3].iter().zip(st).map(|(&n, &st)| (n - 1) * st as usize).sum::<usize>() + shape[3]
            }
            _ => size,
        };
        slots.push((view(t.data, extent * want.size(), &[t.storage, t.storage_len])?, want));
    }
    let mask = if mask.data == 0 {
        None
    } else {
        let Some(mt) = Dtype::elementwise(mask.dtype).filter(|&m| m == Dtype::Bool || m == dtype) else { return Ok(false) };
        // The last element the strides reach, over [batch, heads, query_len, key_len].
        let extent = [b, h, l, n].iter().zip(s.mask_strides).map(|(&size, st)| size.saturating_sub(1) * st as usize).sum::<usize>() + 1;
        let empty = b * h * l * n == 0;
        Some((if empty { 0 } else { view(mask.data, extent * mt.size(), &[mask.storage, mask.storage_len])? }, mt))
    };
    if o == 0 && (!backward || k + v == 0) {
        return Ok(true);
    }
    let work = Attention { shape, slots, mask };
    launch(device, q + k + v + o, move || work.run(backward))?;
    Ok(true)
}

/// An operand: runtime address and dtype.
pub(crate) type Slot = (usize, Dtype);

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Attention {
    pub shape: AttentionShape,
    /// Forward: out, lse | q, k, v. Backward: dq, dk, dv | grad_out, q, k, v, out, lse.
    pub slots: Vec<Slot>,
    /// A boolean mask (false: masked out) or an additive bias, at `shape.mask_strides`.
    pub mask: Option<Slot>,
}

fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// Which of `AttentionShape::input_strides`' five operands an input is.
#[derive(Clone, Copy)]
enum Input {
    Q = 0,
    K = 1,
    V = 2,
    GradOut = 3,
}

impl Attention {
    /// `count` rows of `width` elements of input `which` (slot `slot`), head `h` of sample
    /// `b`, gathered as float32.
    ///
    /// # Safety
    /// The launch checked the rows' extent.
    #[inline(always)]
    unsafe fn rows(&self, slot: usize, which: Input, b: usize, h: usize, count: usize, width: usize) -> Vec<f32> {
        let st = &self.shape.input_strides[which as usize * 3..which as usize * 3 + 3];
        let (ptr, dt) = self.slots[slot];
        let base = b as i64 * st[0] + h as i64 * st[1];
        let mut out = vec![0f32; count * width];
        for (r, row) in out.chunks_exact_mut(width.max(1)).enumerate() {
            let at = (base + r as i64 * st[2]) as usize;
            unsafe { dtype::load(dt, (ptr + at * dt.size()) as *const u8, dt.size() as isize, row) };
        }
        out
    }

    fn dims(&self) -> [usize; 7] {
        let s = &self.shape;
        [s.batch, s.heads, s.kv_heads, s.query_len, s.key_len, s.head_dim, s.value_dim].map(|v| v.max(0) as usize)
    }

    /// Row `i` of head `h` of sample `b`: `scale * q . k_j`, plus the mask, -inf above the
    /// diagonal when causal.
    #[inline(always)]
    fn scores(&self, b: usize, h: usize, i: usize, q: &[f32], k: &[f32], scores: &mut [f32], mask_row: &mut Vec<f32>) {
        let [_, _, _, _, keys, d, _] = self.dims();
        let scale = self.shape.scale as f32;
        for (j, s) in scores.iter_mut().enumerate() {
            *s = scale * dot(q, &k[j * d..(j + 1) * d]);
        }
        if let Some((ptr, dt)) = self.mask {
            let st = self.shape.mask_strides;
            let at = b as i64 * st[0] + h as i64 * st[1] + i as i64 * st[2];
            mask_row.resize(keys, 0.0);
            // SAFETY: the launch checked the mask's extent for these strides.
            unsafe { dtype::load(dt, (ptr + at as usize * dt.size()) as *const u8, st[3] as isize * dt.size() as isize, mask_row) };
            for (s, &m) in scores.iter_mut().zip(mask_row.iter()) {
                *s = if dt == Dtype::Bool { if m != 0.0 { *s } else { f32::NEG_INFINITY } } else { *s + m };
            }
        }
        if self.shape.causal {
            scores.iter_mut().skip(i + 1).for_each(|s| *s = f32::NEG_INFINITY);
        }
    }

    pub(crate) fn run(&self, backward: bool) {
        let [batch, heads, kv_heads, _, _, _, _] = self.dims();
        let [.., rows, keys, d, dv] = self.dims();
        let units = batch * kv_heads;
        // Multiply-adds per unit: the group's scores and products (the backward does about twice).
        let per_unit = heads / kv_heads.max(1) * rows.max(1) * keys.max(1) * (d + dv);
        let parts = thread_pool::threads().min((units * per_unit).div_ceil(1 << 15)).min(units).max(1);
        thread_pool::run(parts, |p| {
            let units = thread_pool::share(p, parts, units);
            // SAFETY: a unit writes only its own heads' rows (and its key/value head's
            // gradients); the launch checked every operand's size. The CPU has the features
            // simd() found.
            unsafe {
                #[cfg(target_arch = "x86_64")]
                match simd() {
                    Simd::Avx512 => return self.units_avx512(units, backward),
                    Simd::Avx2 => return self.units_avx2(units, backward),
                    Simd::Baseline => {}
                }
                self.units(units, backward)
            }
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn units_avx512(&self, units: std::ops::Range<usize>, backward: bool) {
        unsafe { self.units(units, backward) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn units_avx2(&self, units: std::ops::Range<usize>, backward: bool) {
        unsafe { self.units(units, backward) }
    }

    /// # Safety
    /// As for the units' functions.
    #[inline(always)]
    unsafe fn units(&self, units: std::ops::Range<usize>, backward: bool) {
        for unit in units {
            unsafe {
                if backward { self.backward_unit(unit) } else { self.forward_unit(unit) }
            }
        }
    }

    /// Every query head of key/value head `unit % kv_heads` of sample `unit / kv_heads`.
    #[inline(always)]
    unsafe fn forward_unit(&self, unit: usize) {
        let [_, heads, kv_heads, rows, keys, d, dv] = self.dims();
        let (b, g) = (unit / kv_heads, unit % kv_heads);
        let group = heads / kv_heads;
        let (out, lse) = (self.slots[0], self.slots[1]);
        let (mut ob, mut o_rows) = (Vec::new(), Vec::new());
        let (mut scores, mut mask_row) = (vec![0f32; keys], Vec::new());
        unsafe {
            let k = self.rows(3, Input::K, b, g, keys, d);
            let v = self.rows(4, Input::V, b, g, keys, dv);
            for h in g * group..(g + 1) * group {
                let head = b * heads + h;
                let q = self.rows(2, Input::Q, b, h, rows, d);
                let mut lse_rows = vec![0f32; rows];
                // Computed here and copied out after, as in the backward.
                let o = &mut o_rows;
                o.clear();
                o.resize(rows * dv, 0.0);
                for i in 0..rows {
                    self.scores(b, h, i, &q[i * d..(i + 1) * d], &k, &mut scores, &mut mask_row);
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let row = &mut o[i * dv..(i + 1) * dv];
                    row.fill(0.0);
                    if max == f32::NEG_INFINITY {
                        // Every key masked: the math path's softmax gives NaN.
                        row.fill(f32::NAN);
                        lse_rows[i] = f32::NEG_INFINITY;
                        continue;
                    }
                    for s in scores.iter_mut() {
                        *s = exp(*s - max);
                    }
                    let mut total = 0f32;
                    for (j, &e) in scores.iter().enumerate() {
                        total += e;
                        if e != 0.0 {
                            axpy(e, &v[j * dv..(j + 1) * dv], row);
                        }
                    }
                    row.iter_mut().for_each(|x| *x /= total);
                    lse_rows[i] = max + total.ln();
                }
                write(out, head * rows * dv, rows * dv, &mut ob, |out| out.copy_from_slice(o));
                let lse_out = std::slice::from_raw_parts_mut((lse.0 as *mut f32).add(head * rows), rows);
                lse_out.copy_from_slice(&lse_rows);
            }
        }
    }

    #[inline(always)]
    unsafe fn backward_unit(&self, unit: usize) {
        let [_, heads, kv_heads, rows, keys, d, dv] = self.dims();
        let (b, g) = (unit / kv_heads, unit % kv_heads);
        let group = heads / kv_heads;
        let [dq, dk, dv_slot] = [0, 1, 2].map(|i| self.slots[i]);
        let lse = self.slots[8];
        let scale = self.shape.scale as f32;
        let mut scratch = Vec::new();
        let (mut scores, mut mask_row, mut dp) = (vec![0f32; keys], Vec::new(), vec![0f32; keys]);
        let (mut gk, mut gv, mut gq) = (vec![0f32; keys * d], vec![0f32; keys * dv], Vec::new());
        unsafe {
            let kv = b * kv_heads + g;
            let k = self.rows(5, Input::K, b, g, keys, d);
            let v = self.rows(6, Input::V, b, g, keys, dv);
            for h in g * group..(g + 1) * group {
                let head = b * heads + h;
                let q = self.rows(4, Input::Q, b, h, rows, d);
                let grad = self.rows(3, Input::GradOut, b, h, rows, dv);
                let lse_rows = std::slice::from_raw_parts((lse.0 as *const f32).add(head * rows), rows);
                // Computed here and copied out after: a closure given to `write` would be
                // compiled without the SIMD features of the function that inlines this one.
                gq.clear();
                gq.resize(rows * d, 0.0);
                for i in 0..rows {
                    let (qi, gi) = (&q[i * d..(i + 1) * d], &grad[i * dv..(i + 1) * dv]);
                    self.scores(b, h, i, qi, &k, &mut scores, &mut mask_row);
                    // P (the forward's probabilities, from its log-sum-exp) and dP = dO V^T.
                    for s in scores.iter_mut() {
                        *s = exp(*s - lse_rows[i]);
                    }
                    let mut dot_sum = 0f32;
                    for j in 0..keys {
                        dp[j] = dot(gi, &v[j * dv..(j + 1) * dv]);
                        dot_sum += scores[j] * dp[j];
                    }
                    let gq_row = &mut gq[i * d..(i + 1) * d];
                    for j in 0..keys {
                        let p = scores[j];
                        if p == 0.0 {
                            continue; // masked: no gradient anywhere
                        }
                        let ds = p * (dp[j] - dot_sum);
                        axpy(scale * ds, &k[j * d..(j + 1) * d], gq_row);
                        axpy(scale * ds, qi, &mut gk[j * d..(j + 1) * d]);
                        axpy(p, gi, &mut gv[j * dv..(j + 1) * dv]);
                    }
                }
                write(dq, head * rows * d, rows * d, &mut scratch, |out| out.copy_from_slice(&gq));
            }
            write(dk, kv * keys * d, keys * d, &mut scratch, |out| out.copy_from_slice(&gk));
            write(dv_slot, kv * keys * dv, keys * dv, &mut scratch, |out| out.copy_from_slice(&gv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_plain_sum_at_every_length() {
        for n in 0..20 {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - want).abs() < 1e-4, "{n}");
        }
    }
}
