//! 2-D pooling over contiguous `[planes, height, width]` operands (a plane is one channel of
//! one sample): max pooling with the indices backward needs, average pooling, adaptive
//! average pooling, and their backwards. Windows, padding and divisors follow CPU's kernels
//! exactly, NaN included (a NaN wins a max window).

use super::dtype::{Dtype, read, write};
use super::pool;
use crate::ffi::ffi::{Pool2d, PoolShape};

/// An operand: runtime address and dtype (`None`: the int64 indices).
pub(crate) type Slot = (usize, Option<Dtype>);

/// The operands of `op`, output first.
pub(crate) fn operands(op: Pool2d) -> usize {
    match op {
        Pool2d::MaxForward => 3,  // out, indices | input
        Pool2d::MaxBackward => 3, // grad_input | grad_out, indices
        _ => 2,                   // out | input, or grad_input | grad_out
    }
}

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Pooling {
    pub op: Pool2d,
    pub shape: PoolShape,
    pub slots: Vec<Slot>,
}

/// A window along one dimension: taps `start, start + step, ..` below `end`, divided by `size`
/// for an average.
struct Window {
    start: usize,
    end: usize,
    step: usize,
}

// ANCHOR: windows
impl Pooling {
    /// Output `o`'s window along dimension `d`, and the count an average divides by there.
    fn window(&self, d: usize, o: usize) -> (Window, usize) {
        let s = &self.shape;
        let (input, output) = (s.input[d], s.output[d]);
        match self.op {
            Pool2d::AdaptiveAvgForward | Pool2d::AdaptiveAvgBackward => {
                // floor(o * in / out) .. ceil((o + 1) * in / out)
                let (o, i, n) = (o as i64, input, output);
                let start = o * i / n;
                let end = ((o + 1) * i + n - 1) / n;
                (Window { start: start as usize, end: end as usize, step: 1 }, (end - start) as usize)
            }
            Pool2d::MaxForward | Pool2d::MaxBackward => {
                let (k, st, p, dil) = (s.kernel[d], s.stride[d], s.padding[d], s.dilation[d]);
                let mut start = o as i64 * st - p;
                let end = (start + (k - 1) * dil + 1).min(input);
                while start < 0 {
                    start += dil;
                }
                (Window { start: start as usize, end: end.max(start) as usize, step: dil as usize }, 1)
            }
            _ => {
                let (k, st, p) = (s.kernel[d], s.stride[d], s.padding[d]);
                let start = o as i64 * st - p;
                let end = (start + k).min(input + p);
                let padded = end - start; // count_include_pad counts the padding inside the input's reach
                let (start, end) = (start.max(0), end.min(input));
                let count = if s.count_include_pad { padded } else { end - start };
                (Window { start: start as usize, end: end.max(start) as usize, step: 1 }, count.max(0) as usize)
            }
        }
    }
// ANCHOR_END: windows

    pub(crate) fn run(&self) {
        let s = &self.shape;
        let planes = s.planes.max(0) as usize;
        let (ih, iw) = (s.input[0] as usize, s.input[1] as usize);
        let (oh, ow) = (s.output[0] as usize, s.output[1] as usize);
        let (ip, op) = (ih * iw, oh * ow);
        let rows: Vec<_> = (0..oh).map(|o| self.window(0, o)).collect();
        let cols: Vec<_> = (0..ow).map(|o| self.window(1, o)).collect();
        let parts = pool::threads().min((planes * (ip + op)).div_ceil(1 << 15)).min(planes).max(1);
        let backward = matches!(self.op, Pool2d::MaxBackward | Pool2d::AvgBackward | Pool2d::AdaptiveAvgBackward);
        let divide = |count: usize| if s.divisor != 0 { s.divisor as f32 } else { count as f32 };
        pool::run(parts, |p| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for plane in (p..planes).step_by(parts) {
                // SAFETY: one plane of each operand, disjoint per part; sizes checked at launch.
                unsafe {
                    if !backward {
                        let (out, input) = (self.float(0), self.float(self.slots.len() - 1));
                        let x = read(input, plane * ip, ip, &mut a);
                        write(out, plane * op, op, &mut b, |y| {
                            if self.op == Pool2d::MaxForward {
                                let indices = std::slice::from_raw_parts_mut((self.slots[1].0 as *mut i64).add(plane * op), op);
                                for (r, (wr, _)) in rows.iter().enumerate() {
                                    let at = r * ow..(r + 1) * ow;
                                    self.max_row(x, iw, wr, &cols, &mut y[at.clone()], &mut indices[at]);
                                }
                                return;
                            }
                            for (r, (wr, cr)) in rows.iter().enumerate() {
                                for (c, (wc, cc)) in cols.iter().enumerate() {
                                    y[r * ow + c] = {
                                        let mut total = 0.0f32;
                                        for h in (wr.start..wr.end).step_by(wr.step) {
                                            total += x[h * iw + wc.start..h * iw + wc.end].iter().sum::<f32>();
                                        }
                                        if wr.start >= wr.end || wc.start >= wc.end { 0.0 } else { total / divide(cr * cc) }
                                    };
                                }
                            }
                        });
                    } else {
                        let (grad_input, grad_out) = (self.float(0), self.float(1));
                        let dy = read(grad_out, plane * op, op, &mut a);
                        write(grad_input, plane * ip, ip, &mut b, |gi| {
                            gi.fill(0.0);
                            if self.op == Pool2d::MaxBackward {
                                let indices = std::slice::from_raw_parts((self.slots[2].0 as *const i64).add(plane * op), op);
                                for (&at, &g) in indices.iter().zip(dy) {
                                    // An index outside the plane is a caller's error, not a crash.
                                    if let Some(v) = usize::try_from(at).ok().and_then(|at| gi.get_mut(at)) {
                                        *v += g;
                                    }
                                }
                                return;
                            }
                            for (r, (wr, cr)) in rows.iter().enumerate() {
                                for (c, (wc, cc)) in cols.iter().enumerate() {
                                    let g = dy[r * ow + c] / divide(cr * cc);
                                    for h in wr.start..wr.end {
                                        for v in &mut gi[h * iw + wc.start..h * iw + wc.end] {
                                            *v += g;
                                        }
                                    }
                                }
                            }
                        });
                    }
                }
            }
        });
    }

    // ANCHOR: max_row
    /// One output row of a max pool over input rows `wr`. Columns whose window lies inside
    /// the input (all but a few at the edges) take their taps in the same order as
    /// [`max_window`], but a tap at a time across all those columns: one short loop per tap
    /// instead of a window walk per output. Edge columns take [`max_window`].
    fn max_row(&self, x: &[f32], iw: usize, wr: &Window, cols: &[(Window, usize)], y: &mut [f32], indices: &mut [i64]) {
        let s = &self.shape;
        let (k, stride, pad, dil) = (s.kernel[1], s.stride[1], s.padding[1], s.dilation[1]);
        let ow = y.len();
        // Interior: c * stride - pad >= 0 and c * stride - pad + (k - 1) * dil < iw.
        let lo = ((pad + stride - 1) / stride).clamp(0, ow as i64) as usize;
        let last = iw as i64 - 1 + pad - (k - 1) * dil;
        let hi = if last < 0 { lo } else { (last / stride + 1).clamp(lo as i64, ow as i64) as usize };
        for c in (0..lo).chain(hi..ow) {
            let (v, at) = max_window(x, iw, wr, &cols[c].0);
            (y[c], indices[c]) = (v, at as i64);
        }
        let (y, indices) = (&mut y[lo..hi], &mut indices[lo..hi]);
        let (stride, dil) = (stride as usize, dil as usize);
        let first = |c: usize| (lo + c) * stride - pad as usize; // the window's first column
        for (c, (y, at)) in y.iter_mut().zip(indices.iter_mut()).enumerate() {
            (*y, *at) = (f32::NEG_INFINITY, (wr.start * iw + first(c)) as i64);
        }
        for h in (wr.start..wr.end).step_by(wr.step) {
            let row = &x[h * iw..(h + 1) * iw];
            for tap in 0..k as usize {
                let start = first(0) + tap * dil;
                let at_of = |c: usize| (h * iw + start + c * stride) as i64;
                if stride == 1 {
                    // Neighbouring outputs read neighbouring inputs: slices, no bounds checks.
                    let taps = &row[start..start + y.len()];
                    for (c, (&v, (y, at))) in taps.iter().zip(y.iter_mut().zip(indices.iter_mut())).enumerate() {
                        if v > *y || v.is_nan() {
                            (*y, *at) = (v, at_of(c));
                        }
                    }
                    continue;
                }
                for (c, (y, at)) in y.iter_mut().zip(indices.iter_mut()).enumerate() {
                    let v = row[start + c * stride];
                    if v > *y || v.is_nan() {
                        (*y, *at) = (v, at_of(c));
                    }
                }
            }
        }
    }
    // ANCHOR_END: max_row

    fn float(&self, k: usize) -> (usize, Dtype) {
        (self.slots[k].0, self.slots[k].1.unwrap_or(Dtype::Float))
    }
}

/// The largest element of a window (a NaN wins; the last one, as on CPU) and its index in the plane; CPU's first tap
/// when the window is empty.
fn max_window(x: &[f32], width: usize, rows: &Window, cols: &Window) -> (f32, usize) {
    let (mut best, mut at) = (f32::NEG_INFINITY, rows.start * width + cols.start);
    for h in (rows.start..rows.end).step_by(rows.step) {
        for w in (cols.start..cols.end).step_by(cols.step) {
            let v = x[h * width + w];
            if v > best || v.is_nan() {
                (best, at) = (v, h * width + w);
            }
        }
    }
    (best, at)
}
