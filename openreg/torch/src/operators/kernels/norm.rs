//! Normalization layers. Group norm normalizes each group of channels of a sample over its
//! (contiguous) elements, then scales and shifts per channel; layer norm is the same kernel
//! with one group whose channels are a row's elements. Batch norm normalizes each channel over
//! the batch, and in training updates the running statistics in place.
//!
//! Statistics are two passes (mean, then the centred sum of squares). Group and layer norm sum
//! in 16 float32 partial sums added in float64; batch norm sums entirely in float64, as CPU
//! does for it. Both are vectorised.

use openreg_runtime as rt;

use super::dtype::{self, Dtype, read, write};
use super::thread_pool;
use super::{launch, dense};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, Norm, NormShape};

// ANCHOR: launch_norm
/// Launches a normalization kernel; `operands` in [`operands`]'s order, an absent one
/// (no weight, a gradient not asked for, batch norm's statistics in eval) with address 0.
/// False, having done nothing, if a dtype is not float32, float16 or bfloat16, or the batch is
/// empty (CPU's kernel then says what the statistics of nothing are).
pub(crate) fn launch_norm(op: Norm, shape: NormShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op:?}: {what}")));
    let (count, _) = operand_count(op);
    if operands.len() != count {
        return Err(invalid(format!("{count} operands expected, got {}", operands.len())));
    }
    let [n, c, s, g] = [shape.batch, shape.channels, shape.inner, shape.groups].map(|v| v.max(0) as usize);
    if g == 0 || c % g != 0 {
        return Err(invalid(format!("{c} channels do not split into {g} groups")));
    }
    let (all, stats) = (n * c * s, if matches!(op, Norm::GroupNorm | Norm::GroupNormBackward) { n * g } else { c });
    let (sizes, required): (&[usize], &[usize]) = match op {
        Norm::GroupNorm => (&[all, stats, stats, all, c, c], &[0, 1, 2, 3]),
        Norm::GroupNormBackward => (&[all, c, c, all, all, stats, stats, c], &[3, 4, 5, 6]),
        Norm::BatchNorm if shape.training => (&[all, c, c, c, c, all, c, c], &[0, 1, 2, 5]),
        Norm::BatchNorm => (&[all, c, c, c, c, all, c, c], &[0, 3, 4, 5]),
        _ if shape.training => (&[all, c, c, all, all, c, c, c, c, c], &[3, 4, 8, 9]),
        _ => (&[all, c, c, all, all, c, c, c, c, c], &[3, 4, 6, 7]),
    };
    if all == 0 {
        // Nothing to write is done; statistics or gradients of nothing are CPU's to define.
        return Ok(operands[..operand_count(op).1].iter().all(|t| t.numel == 0));
    }
    let mut slots = Vec::with_capacity(count);
    for (k, t) in operands.iter().enumerate() {
        if t.data == 0 || (t.numel == 0 && sizes[k] != 0) {
            if required.contains(&k) {
                return Err(invalid(format!("operand {k} is required")));
            }
            slots.push((0, Dtype::Float));
            continue;
        }
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != sizes[k] {
            return Err(invalid(format!("operand {k} has {} elements, {} expected", t.numel, sizes[k])));
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    let work = Normalization { op, shape, slots };
    launch(device, all, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_norm

/// An operand: runtime address (0: absent) and dtype.
pub(crate) type Slot = (usize, Dtype);

/// How many operands `op` takes (outputs first, in C++'s order), and how many are outputs.
pub(crate) fn operand_count(op: Norm) -> (usize, usize) {
    match op {
        // out, mean, rstd | input, weight, bias
        Norm::GroupNorm => (6, 3),
        // grad_input, grad_weight, grad_bias | grad_out, input, mean, rstd, weight
        Norm::GroupNormBackward => (8, 3),
        // out, save_mean, save_invstd, running_mean, running_var | input, weight, bias
        Norm::BatchNorm => (8, 5),
        // grad_input, grad_weight, grad_bias | grad_out, input, weight, running_mean,
        // running_var, save_mean, save_invstd
        Norm::BatchNormBackward => (10, 3),
        _ => (0, 0),
    }
}

const LANES: usize = 16;
/// Independent SIMD accumulators: one register of partial sums is a chain of additions, each
/// waiting for the last (4 cycles per 16 elements); four interleave and keep the adder busy.
const CHAINS: usize = 4;

/// Σ f(x) over `x`, in `CHAINS x LANES` float32 partial sums the compiler vectorises.
#[inline(always)]
fn sum(x: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut acc = [[0.0f32; LANES]; CHAINS];
    let (chunks, rest) = x.as_chunks::<{ CHAINS * LANES }>();
    for c in chunks {
        for (j, acc) in acc.iter_mut().enumerate() {
            for i in 0..LANES {
                acc[i] += f(c[j * LANES + i]);
            }
        }
    }
    lanes_total(acc) + rest.iter().map(|&v| f(v) as f64).sum::<f64>()
}

/// Σ f(x) over `x` in float64 (`f` sees each element widened): batch norm's statistics, which
/// CPU accumulates in double. Four chains of four partial sums keep it vectorised.
#[inline(always)]
fn sum64(x: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [[0.0f64; 4]; CHAINS];
    let (chunks, rest) = x.as_chunks::<{ CHAINS * 4 }>();
    for c in chunks {
        for (j, acc) in acc.iter_mut().enumerate() {
            for i in 0..4 {
                acc[i] += f(f64::from(c[j * 4 + i]));
            }
        }
    }
    let lanes: f64 = acc.iter().map(|a| (a[0] + a[2]) + (a[1] + a[3])).sum();
    lanes + rest.iter().map(|&v| f(f64::from(v))).sum::<f64>()
}

/// Σ dy * (x - mean) in float64.
#[inline(always)]
fn dot64(dy: &[f32], x: &[f32], mean: f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let (dc, dr) = dy.as_chunks::<4>();
    let (xc, xr) = x.as_chunks::<4>();
    for (d, x) in dc.iter().zip(xc) {
        for i in 0..4 {
            acc[i] += f64::from(d[i]) * (f64::from(x[i]) - mean);
        }
    }
    (acc[0] + acc[2]) + (acc[1] + acc[3]) + dr.iter().zip(xr).map(|(&d, &x)| f64::from(d) * (f64::from(x) - mean)).sum::<f64>()
}

/// [`sum`] for short rows (a few chunks of 16): one register of partial sums, folded in
/// registers. `sum`'s fold reads its sums back from memory right after storing them as whole
/// vectors, and that reload waited for the store: a third of a 64-element row's time.
#[inline(always)]
fn short_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut acc = [0.0f32; LANES];
    let (chunks, rest) = x.as_chunks::<LANES>();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += f(c[i]);
        }
    }
    f64::from(fold(acc)) + rest.iter().map(|&v| f(v) as f64).sum::<f64>()
}

/// One register's lanes added pairwise, in registers.
#[inline(always)]
fn fold(acc: [f32; LANES]) -> f32 {
    let half: [f32; 8] = std::array::from_fn(|i| acc[i] + acc[i + 8]);
    let quarter: [f32; 4] = std::array::from_fn(|i| half[i] + half[i + 4]);
    (quarter[0] + quarter[2]) + (quarter[1] + quarter[3])
}

/// The partial sums' total: the chains added lane by lane (one SIMD addition each), then the
/// lanes pairwise (added in a row, 16 dependent additions per sum, and each row has two sums:
/// for rows of 64 that was most of the time).
#[inline(always)]
fn lanes_total(acc: [[f32; LANES]; CHAINS]) -> f64 {
    // Stored once as a whole: without this the compiler packed the running sums of the loop
    // before as 2-wide vectors, to suit the lane-by-lane additions below (as in softmax).
    let acc = std::hint::black_box(acc);
    let mut lanes = [0.0f32; LANES];
    for (i, l) in lanes.iter_mut().enumerate() {
        *l = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
    }
    for i in 0..8 {
        lanes[i] += lanes[i + 8];
    }
    for i in 0..4 {
        lanes[i] += lanes[i + 4];
    }
    f64::from((lanes[0] + lanes[2]) + (lanes[1] + lanes[3]))
}

/// A whole per-channel operand as float32, or `fill` when it is absent.
fn channels(slot: Slot, count: usize, fill: f32) -> Vec<f32> {
    let mut v = vec![fill; count];
    if slot.0 != 0 {
        // SAFETY: `count` elements, checked at launch.
        unsafe { dtype::load(slot.1, slot.0 as *const u8, slot.1.size() as isize, &mut v) };
    }
    v
}

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Normalization {
    pub op: Norm,
    pub shape: NormShape,
    pub slots: Vec<Slot>,
}

impl Normalization {
    fn dims(&self) -> (usize, usize, usize, usize) {
        let s = &self.shape;
        let n = |v: i64| v.max(0) as usize;
        (n(s.batch), n(s.channels), n(s.inner), n(s.groups).max(1))
    }

    pub(crate) fn run(&self) {
        match self.op {
            Norm::GroupNorm => self.group_norm(),
            Norm::GroupNormBackward => self.group_norm_backward(),
            Norm::BatchNorm => self.batch_norm(),
            _ => self.batch_norm_backward(),
        }
    }

    /// Parts for `items` independent pieces of `size` elements each.
    fn parts(items: usize, size: usize) -> usize {
        thread_pool::threads().min((items * size).div_ceil(1 << 15)).min(items).max(1)
    }

// ANCHOR: group_norm
    fn group_norm(&self) {
        let (n, c, s, g) = self.dims();
        let [out, mean, rstd, input, weight, bias] = self.slots[..] else { return };
        let (weight, bias) = (channels(weight, c, 1.0), channels(bias, c, 0.0));
        let (group, len) = (c / g, c / g * s);
        let parts = Self::parts(n * g, len);
        thread_pool::run(parts, |p| {
            let (mut sx, mut sy) = (Vec::new(), Vec::new());
            for r in thread_pool::share(p, parts, n * g) {
                // SAFETY: rows are disjoint per part; sizes were checked at launch.
                unsafe {
                    let x = read(input, r * len, len, &mut sx);
                    let first = r % g * group; // the group's first channel
                    let (w, b) = (&weight[first..first + group], &bias[first..first + group]);
                    let mut stats = (0.0, 0.0);
                    write(out, r * len, len, &mut sy, |y| stats = normalize(x, y, w, b, s, self.shape.eps));
                    write(mean, r, 1, &mut Vec::new(), |v| v[0] = stats.0);
                    write(rstd, r, 1, &mut Vec::new(), |v| v[0] = stats.1);
                }
            }
        });
    }
// ANCHOR_END: group_norm

    fn group_norm_backward(&self) {
        let (n, c, s, g) = self.dims();
        let [grad_input, grad_weight, grad_bias, grad_out, input, mean, rstd, weight] = self.slots[..] else { return };
        let weight = channels(weight, c, 1.0);
        let (group, len) = (c / g, c / g * s);
        let parts = Self::parts(n * g, len);
        let sums: Vec<std::sync::Mutex<(Vec<f64>, Vec<f64>)>> = (0..parts).map(|_| Default::default()).collect();
        thread_pool::run(parts, |p| {
            let (mut sx, mut sg, mut sy) = (Vec::new(), Vec::new(), Vec::new());
            let (mut gw, mut gb) = (vec![0.0f64; c], vec![0.0f64; c]);
            let (mut xhat, mut dxhat) = (Vec::new(), Vec::new());
            // With a weight per element: float32 sums over this part's rows, added in float64 after.
            let (mut lw, mut lb) = (vec![0.0f32; if s == 1 { c } else { 0 }], vec![0.0f32; if s == 1 { c } else { 0 }]);
            for r in thread_pool::share(p, parts, n * g) {
                // SAFETY: as in group_norm.
                unsafe {
                    let x = read(input, r * len, len, &mut sx);
                    let dy = read(grad_out, r * len, len, &mut sg);
                    let (m, rs) = (read(mean, r, 1, &mut Vec::new())[0], read(rstd, r, 1, &mut Vec::new())[0]);
                    let first = r % g * group;
                    if s == 1 {
                        // A weight per element: layer norm (one group a row), or group norm
                        // without spatial dimensions.
                        let at = first..first + len;
                        let (w, gw, gb) = (&weight[at.clone()], &mut lw[at.clone()], &mut lb[at]);
                        if grad_input.0 == 0 {
                            layer_norm_row_backward(x, dy, w, (m, rs), gw, gb, None);
                        } else {
                            write(grad_input, r * len, len, &mut sy, |gi| layer_norm_row_backward(x, dy, w, (m, rs), gw, gb, Some(gi)));
                        }
                        continue;
                    }
                    xhat.clear();
                    xhat.extend(x.iter().map(|&v| (v - m) * rs));
                    // Σ over the group of dxhat = dy * w, and of dxhat * xhat.
                    let (mut a, mut b) = (0.0f64, 0.0f64);
                    if s == 1 {
                        // layer norm: a weight per element, one pass over the row
                        dxhat.clear();
                        dxhat.extend(dy.iter().zip(&weight[first..first + len]).map(|(&dy, &w)| dy * w));
                        a = sum(&dxhat, |v| v);
                        b = dy_dot(&dxhat, &xhat);
                        let (gw, gb) = (&mut gw[first..first + len], &mut gb[first..first + len]);
                        for (((gw, gb), &dy), &xh) in gw.iter_mut().zip(gb.iter_mut()).zip(dy).zip(&xhat) {
                            *gw += (dy * xh) as f64;
                            *gb += dy as f64;
                        }
                    }
                    for k in 0..group * (s != 1) as usize {
                        let w = weight[first + k];
                        let (dy, xh) = (&dy[k * s..][..s], &xhat[k * s..][..s]);
                        let (sum_dy, sum_dy_xh) = (sum(dy, |v| v), dy_dot(dy, xh));
                        a += sum_dy * w as f64;
                        b += sum_dy_xh * w as f64;
                        gw[first + k] += sum_dy_xh;
                        gb[first + k] += sum_dy;
                    }
                    if grad_input.0 != 0 {
                        let (a, b) = ((a / len.max(1) as f64) as f32, (b / len.max(1) as f64) as f32);
                        write(grad_input, r * len, len, &mut sy, |gi| {
                            if s == 1 {
                                for (((gi, &dy), &xh), &w) in gi.iter_mut().zip(dy).zip(&xhat).zip(&weight[first..first + len]) {
                                    *gi = rs * (dy * w - a - xh * b);
                                }
                                return;
                            }
                            for k in 0..group {
                                let w = weight[first + k];
                                let range = k * s..(k + 1) * s;
                                for ((gi, &dy), &xh) in gi[range.clone()].iter_mut().zip(&dy[range.clone()]).zip(&xhat[range]) {
                                    *gi = rs * (dy * w - a - xh * b);
                                }
                            }
                        });
                    }
                }
            }
            for ((gw, gb), (&lw, &lb)) in gw.iter_mut().zip(gb.iter_mut()).zip(lw.iter().zip(&lb)) {
                (*gw, *gb) = (*gw + lw as f64, *gb + lb as f64);
            }
            *sums[p].lock().unwrap_or_else(|e| e.into_inner()) = (gw, gb);
        });
        self.store_parameter_grads(sums, grad_weight, grad_bias, c);
    }

    /// Adds the parts' per-channel sums and stores them as the weight and bias gradients.
    fn store_parameter_grads(&self, sums: Vec<std::sync::Mutex<(Vec<f64>, Vec<f64>)>>, grad_weight: Slot, grad_bias: Slot, c: usize) {
        let (mut gw, mut gb) = (vec![0.0f64; c], vec![0.0f64; c]);
        for part in sums {
            let (w, b) = part.into_inner().unwrap_or_else(|e| e.into_inner());
            for (t, v) in gw.iter_mut().zip(w).chain(gb.iter_mut().zip(b)) {
                *t += v;
            }
        }
        for (slot, values) in [(grad_weight, gw), (grad_bias, gb)] {
            if slot.0 != 0 {
                let values: Vec<f32> = values.into_iter().map(|v| v as f32).collect();
                // SAFETY: `c` elements, checked at launch.
                unsafe { dtype::store(slot.1, slot.0 as *mut u8, slot.1.size() as isize, &values) };
            }
        }
    }

// ANCHOR: batch_norm
    fn batch_norm(&self) {
        let (n, c, s, _) = self.dims();
        let [out, save_mean, save_invstd, running_mean, running_var, input, weight, bias] = self.slots[..] else { return };
        let (weight, bias) = (channels(weight, c, 1.0), channels(bias, c, 0.0));
        let (rm, rv) = (channels(running_mean, c, 0.0), channels(running_var, c, 1.0));
        let (training, eps, momentum) = (self.shape.training, self.shape.eps, self.shape.momentum as f32);
        let count = n * s;
        let parts = Self::parts(c, count);
        thread_pool::run(parts, |p| {
            let (mut sx, mut sy) = (Vec::new(), Vec::new());
            for ch in thread_pool::share(p, parts, c) {
                // SAFETY: channel `ch` of every sample, disjoint per part; checked at launch.
                unsafe {
                    let (m, invstd) = if training {
                        // In float64 throughout, as CPU's acc_type<float, false> (its
                        // batch_norm_cpu_collect_stats): the mean, each deviation, each square.
                        let total: f64 = (0..n).map(|i| sum64(read(input, (i * c + ch) * s, s, &mut sx), |v| v)).sum();
                        let mean = total / count.max(1) as f64;
                        let m = mean as f32;
                        let squares: f64 =
                            (0..n).map(|i| sum64(read(input, (i * c + ch) * s, s, &mut sx), |v| (v - mean) * (v - mean))).sum();
                        let invstd = (1.0 / (squares / count.max(1) as f64 + eps).sqrt()) as f32;
                        write(save_mean, ch, 1, &mut Vec::new(), |v| v[0] = m);
                        write(save_invstd, ch, 1, &mut Vec::new(), |v| v[0] = invstd);
                        // The running variance is unbiased (n - 1), as CPU's.
                        let unbiased = (squares / (count as f64 - 1.0)) as f32;
                        if running_mean.0 != 0 {
                            write(running_mean, ch, 1, &mut Vec::new(), |v| v[0] = (1.0 - momentum) * rm[ch] + momentum * m);
                        }
                        if running_var.0 != 0 {
                            write(running_var, ch, 1, &mut Vec::new(), |v| v[0] = (1.0 - momentum) * rv[ch] + momentum * unbiased);
                        }
                        (m, invstd)
                    } else {
                        (rm[ch], (1.0 / (rv[ch] as f64 + eps).sqrt()) as f32)
                    };
                    let scale = invstd * weight[ch];
                    let shift = bias[ch] - m * scale;
                    for i in 0..n {
                        let x = read(input, (i * c + ch) * s, s, &mut sx);
                        write(out, (i * c + ch) * s, s, &mut sy, |y| {
                            for (y, &x) in y.iter_mut().zip(x) {
                                *y = x * scale + shift;
                            }
                        });
                    }
                }
            }
        });
    }
// ANCHOR_END: batch_norm

    fn batch_norm_backward(&self) {
        let (n, c, s, _) = self.dims();
        let [grad_input, grad_weight, grad_bias, grad_out, input, weight, running_mean, running_var, save_mean, save_invstd] =
            self.slots[..]
        else {
            return;
        };
        let weight = channels(weight, c, 1.0);
        let (training, eps) = (self.shape.training, self.shape.eps);
        let (mean, invstd): (Vec<f32>, Vec<f32>) = if training {
            (channels(save_mean, c, 0.0), channels(save_invstd, c, 0.0))
        } else {
            let rv = channels(running_var, c, 1.0);
            (channels(running_mean, c, 0.0), rv.iter().map(|&v| (1.0 / (v as f64 + eps).sqrt()) as f32).collect())
        };
        let count = n * s;
        let parts = Self::parts(c, count);
        thread_pool::run(parts, |p| {
            let (mut sx, mut sg, mut sy) = (Vec::new(), Vec::new(), Vec::new());
            for ch in thread_pool::share(p, parts, c) {
                let (m, is, w) = (mean[ch], invstd[ch], weight[ch]);
                // SAFETY: as in batch_norm.
                unsafe {
                    let (mut sum_dy, mut sum_dy_xc) = (0.0f64, 0.0f64);
                    for i in 0..n {
                        let at = (i * c + ch) * s;
                        let dy = read(grad_out, at, s, &mut sg);
                        let x = read(input, at, s, &mut sx);
                        // float64, as CPU's: the products too.
                        sum_dy += sum64(dy, |v| v);
                        sum_dy_xc += dot64(dy, x, f64::from(m));
                    }
                    if grad_weight.0 != 0 {
                        write(grad_weight, ch, 1, &mut Vec::new(), |v| v[0] = (sum_dy_xc * is as f64) as f32);
                    }
                    if grad_bias.0 != 0 {
                        write(grad_bias, ch, 1, &mut Vec::new(), |v| v[0] = sum_dy as f32);
                    }
                    if grad_input.0 == 0 {
                        continue;
                    }
                    // Training: the statistics depend on the input too.
                    let (mean_dy, k) = if training {
                        ((sum_dy / count as f64) as f32, (sum_dy_xc * (is as f64).powi(2) / count as f64) as f32)
                    } else {
                        (0.0, 0.0)
                    };
                    for i in 0..n {
                        let at = (i * c + ch) * s;
                        let dy = read(grad_out, at, s, &mut sg);
                        let x = read(input, at, s, &mut sx);
                        write(grad_input, at, s, &mut sy, |gi| {
                            for ((gi, &dy), &x) in gi.iter_mut().zip(dy).zip(x) {
                                *gi = (dy - mean_dy - (x - m) * k) * is * w;
                            }
                        });
                    }
                }
            }
        });
    }
}

// ANCHOR: normalize
/// One group: `y = (x - mean) * rstd * w + b`, with a weight per element (`s == 1`, layer
/// norm) or per channel of `s` elements. Returns (mean, rstd). Compiled for the widest SIMD
/// the CPU has, as softmax is.
fn normalize(x: &[f32], y: &mut [f32], w: &[f32], b: &[f32], s: usize, eps: f64) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { normalize_avx512(x, y, w, b, s, eps) },
            Simd::Avx2 => return unsafe { normalize_avx2(x, y, w, b, s, eps) },
            Simd::Baseline => {}
        }
    }
    normalize_any(x, y, w, b, s, eps)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn normalize_avx512(x: &[f32], y: &mut [f32], w: &[f32], b: &[f32], s: usize, eps: f64) -> (f32, f32) {
    normalize_any(x, y, w, b, s, eps)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn normalize_avx2(x: &[f32], y: &mut [f32], w: &[f32], b: &[f32], s: usize, eps: f64) -> (f32, f32) {
    normalize_any(x, y, w, b, s, eps)
}

#[inline(always)]
fn normalize_any(x: &[f32], y: &mut [f32], w: &[f32], b: &[f32], s: usize, eps: f64) -> (f32, f32) {
    // Means by a multiply: a division waits for the sum, and the next pass for it.
    let per = 1.0 / x.len().max(1) as f64;
    let (m, rs) = if x.len() <= 4 * LANES {
        let m = (short_sum(x, |v| v) * per) as f32;
        (m, (1.0 / (short_sum(x, |v| (v - m) * (v - m)) * per + eps).sqrt()) as f32)
    } else {
        let m = (sum(x, |v| v) * per) as f32;
        (m, (1.0 / (sum(x, |v| (v - m) * (v - m)) * per + eps).sqrt()) as f32)
    };
    if s == 1 {
        for (((y, &x), &w), &b) in y.iter_mut().zip(x).zip(w).zip(b) {
            *y = (x - m) * rs * w + b;
        }
    } else {
        for (k, (y, x)) in y.chunks_exact_mut(s).zip(x.chunks_exact(s)).enumerate() {
            let scale = rs * w[k];
            let shift = b[k] - m * scale;
            for (y, &x) in y.iter_mut().zip(x) {
                *y = x * scale + shift;
            }
        }
    }
    (m, rs)
}
// ANCHOR_END: normalize

// ANCHOR: layer_norm_backward
/// One row of layer norm's backward, `x̂ = (x - mean) * rstd`: the weight and bias gradients
/// (`gw += dy * x̂`, `gb += dy`, float32 per element over a part's rows, as on CPU), and
/// `gi = rstd * (dy * w - mean(dy * w) - x̂ * mean(dy * w * x̂))`. Two passes and no temporary
/// rows, compiled for the widest SIMD: written inline in the generic group-norm loop (SSE2,
/// two temporaries, float64 sums per element) it was 2.7–5.4x the CPU's time on rows of 32–256.
fn layer_norm_row_backward(x: &[f32], dy: &[f32], w: &[f32], stats: (f32, f32), gw: &mut [f32], gb: &mut [f32], gi: Option<&mut [f32]>) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { layer_norm_row_backward_avx512(x, dy, w, stats, gw, gb, gi) },
            Simd::Avx2 => return unsafe { layer_norm_row_backward_avx2(x, dy, w, stats, gw, gb, gi) },
            Simd::Baseline => {}
        }
    }
    layer_norm_row_backward_any(x, dy, w, stats, gw, gb, gi)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn layer_norm_row_backward_avx512(x: &[f32], dy: &[f32], w: &[f32], stats: (f32, f32), gw: &mut [f32], gb: &mut [f32], gi: Option<&mut [f32]>) {
    layer_norm_row_backward_any(x, dy, w, stats, gw, gb, gi)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn layer_norm_row_backward_avx2(x: &[f32], dy: &[f32], w: &[f32], stats: (f32, f32), gw: &mut [f32], gb: &mut [f32], gi: Option<&mut [f32]>) {
    layer_norm_row_backward_any(x, dy, w, stats, gw, gb, gi)
}

#[inline(always)]
fn layer_norm_row_backward_any(x: &[f32], dy: &[f32], w: &[f32], (m, rs): (f32, f32), gw: &mut [f32], gb: &mut [f32], gi: Option<&mut [f32]>) {
    let n = x.len();
    let (dy, w, gw, gb) = (&dy[..n], &w[..n], &mut gw[..n], &mut gb[..n]);
    // Σ dy*w and Σ dy*w*x̂ in lanes, the parameter gradients in the same pass.
    let (mut a, mut b) = ([0.0f32; LANES], [0.0f32; LANES]);
    let (xc, xr) = x.as_chunks::<LANES>();
    let (dc, dr) = dy.as_chunks::<LANES>();
    let (wc, wr) = w.as_chunks::<LANES>();
    let (gwc, gwr) = gw.as_chunks_mut::<LANES>();
    let (gbc, gbr) = gb.as_chunks_mut::<LANES>();
    for ((((x, dy), w), gw), gb) in xc.iter().zip(dc).zip(wc).zip(gwc.iter_mut()).zip(gbc.iter_mut()) {
        for i in 0..LANES {
            let xh = (x[i] - m) * rs;
            let g = dy[i] * w[i];
            a[i] += g;
            b[i] += g * xh;
            gw[i] += dy[i] * xh;
            gb[i] += dy[i];
        }
    }
    let (mut ra, mut rb) = (0.0f32, 0.0f32);
    for ((((&x, &dy), &w), gw), gb) in xr.iter().zip(dr).zip(wr).zip(gwr.iter_mut()).zip(gbr.iter_mut()) {
        let xh = (x - m) * rs;
        (ra, rb) = (ra + dy * w, rb + dy * w * xh);
        (*gw, *gb) = (*gw + dy * xh, *gb + dy);
    }
    let Some(gi) = gi else { return };
    // Means by a multiply: two float64 divisions per row held up every row of 64 (8192x64
    // waited on them for an eighth of its time).
    let per = 1.0 / n.max(1) as f32;
    let (a, b) = ((fold(a) + ra) * per, (fold(b) + rb) * per);
    for (((gi, &x), &dy), &w) in gi[..n].iter_mut().zip(x).zip(dy).zip(w) {
        *gi = rs * (dy * w - a - (x - m) * rs * b);
    }
}
// ANCHOR_END: layer_norm_backward

/// Σ a[i] * b[i] in float32 partial sums.
#[inline(always)]
fn dy_dot(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [[0.0f32; LANES]; CHAINS];
    let n = a.len().min(b.len());
    let ((ca, ra), (cb, rb)) = (a[..n].as_chunks::<{ CHAINS * LANES }>(), b[..n].as_chunks::<{ CHAINS * LANES }>());
    for (x, y) in ca.iter().zip(cb) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for i in 0..LANES {
                acc[i] += x[j * LANES + i] * y[j * LANES + i];
            }
        }
    }
    lanes_total(acc) + ra.iter().zip(rb).map(|(&x, &y)| (x * y) as f64).sum::<f64>()
}
