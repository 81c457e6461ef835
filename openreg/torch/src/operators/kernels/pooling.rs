//! Pooling over contiguous `[planes, depth, height, width]` operands (a plane is one channel
//! of one sample; 2-D pooling has depth 1): max pooling with the indices backward needs,
//! average pooling, adaptive average and max pooling, and their backwards. Windows, padding and
//! divisors follow CPU's kernels exactly, NaN included (a NaN wins a max window).

use openreg_runtime as rt;

use super::dtype::{Dtype, INT64, read, write};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, Pool, PoolShape};

/// Launches a pooling kernel; `operands` in [`operands`]'s order (indices are int64).
/// False, having done nothing, if a dtype is not ours or an operand is empty.
pub(crate) fn launch_pool(op: Pool, shape: PoolShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op:?}: {what}")));
    if operands.len() != operand_count(op) {
        return Err(invalid(format!("{} operands expected, got {}", operand_count(op), operands.len())));
    }
    let s = &shape;
    let positive = [s.kernel, s.stride, s.dilation].iter().flatten().all(|&v| v > 0);
    let sizes = [s.input, s.output].iter().flatten().chain(&s.padding).all(|&v| v >= 0);
    let adaptive = matches!(op, Pool::AdaptiveAvgForward | Pool::AdaptiveAvgBackward | Pool::AdaptiveMaxForward | Pool::AdaptiveMaxBackward);
    if s.planes < 0 || !sizes || (!adaptive && !positive) {
        return Err(invalid(format!("invalid shape {shape:?}")));
    }
    let volume = |v: [i64; 3]| v.iter().try_fold(s.planes as usize, |n, &d| n.checked_mul(d as usize));
    let (Some(input), Some(output)) = (volume(s.input), volume(s.output)) else {
        return Err(invalid(format!("invalid shape {shape:?}")));
    };
    if input == 0 || output == 0 {
        let outputs = if indices_slot(op) == Some(1) { 2 } else { 1 };
        return Ok(operands[..outputs].iter().all(|t| t.numel == 0));
    }
    let sizes: [usize; 3] = match (is_backward(op), indices_slot(op)) {
        (false, Some(_)) => [output, output, input],
        (true, Some(_)) => [input, output, output],
        (false, None) => [output, input, 0],
        (true, None) => [input, output, 0],
    };
    let indices = indices_slot(op);
    let mut slots = Vec::with_capacity(operands.len());
    for (k, t) in operands.iter().enumerate() {
        let dtype = Dtype::from_code(t.dtype);
        if (Some(k) == indices && t.dtype != INT64) || (Some(k) != indices && dtype.is_none()) {
            return Ok(false);
        }
        if t.numel != sizes[k] {
            return Err(invalid(format!("operand {k} has {} elements, {} expected", t.numel, sizes[k])));
        }
        let size = dtype.map_or(8, Dtype::size);
        slots.push((view(t.data, t.numel * size, &[t.storage, t.storage_len])?, dtype));
    }
    let work = Pooling { op, shape, slots };
    launch(device, input + output, move || work.run())?;
    Ok(true)
}

/// An operand: runtime address and dtype (`None`: the int64 indices).
pub(crate) type Slot = (usize, Option<Dtype>);

/// How many operands `op` takes, output first.
pub(crate) fn operand_count(op: Pool) -> usize {
    match op {
        Pool::MaxForward | Pool::AdaptiveMaxForward => 3,   // out, indices | input
        Pool::MaxBackward | Pool::AdaptiveMaxBackward => 3, // grad_input | grad_out, indices
        _ => 2,                                             // out | input, or grad_input | grad_out
    }
}

/// The int64 indices' position among `op`'s operands, if it has them.
pub(crate) fn indices_slot(op: Pool) -> Option<usize> {
    match op {
        Pool::MaxForward | Pool::AdaptiveMaxForward => Some(1),
        Pool::MaxBackward | Pool::AdaptiveMaxBackward => Some(2),
        _ => None,
    }
}

/// Whether `op` is a backward (grad_input first, grad_out second).
pub(crate) fn is_backward(op: Pool) -> bool {
    matches!(op, Pool::MaxBackward | Pool::AvgBackward | Pool::AdaptiveAvgBackward | Pool::AdaptiveMaxBackward)
}

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Pooling {
    pub op: Pool,
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
    /// Output `o`'s window along dimension `d` (0 depth, 1 height, 2 width), and the count an
    /// average divides by there.
    fn window(&self, d: usize, o: usize) -> (Window, usize) {
        let s = &self.shape;
        let (input, output) = (s.input[d], s.output[d]);
        match self.op {
            Pool::AdaptiveAvgForward | Pool::AdaptiveAvgBackward | Pool::AdaptiveMaxForward | Pool::AdaptiveMaxBackward => {
                // floor(o * in / out) .. ceil((o + 1) * in / out)
                let (o, i, n) = (o as i64, input, output);
                let start = o * i / n;
                let end = ((o + 1) * i + n - 1) / n;
                (Window { start: start as usize, end: end as usize, step: 1 }, (end - start) as usize)
            }
            Pool::MaxForward | Pool::MaxBackward => {
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
        let [id, ih, iw] = s.input.map(|v| v as usize);
        let [od, oh, ow] = s.output.map(|v| v as usize);
        let (ip, op) = (id * ih * iw, od * oh * ow);
        let windows = |d: usize, n: usize| -> Vec<_> { (0..n).map(|o| self.window(d, o)).collect() };
        let (deps, rows, cols) = (windows(0, od), windows(1, oh), windows(2, ow));
        let parts = thread_pool::threads().min((planes * (ip + op)).div_ceil(1 << 15)).min(planes).max(1);
        let max = matches!(self.op, Pool::MaxForward | Pool::AdaptiveMaxForward | Pool::MaxBackward | Pool::AdaptiveMaxBackward);
        // 2-D max pooling (one depth tap) takes the row-wise kernel below.
        let flat = self.op == Pool::MaxForward && id == 1 && od == 1;
        let divide = |count: usize| if s.divisor != 0 { s.divisor as f32 } else { count as f32 };
        thread_pool::run(parts, |p| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for plane in thread_pool::share(p, parts, planes) {
                // SAFETY: one plane of each operand, disjoint per part; sizes checked at launch.
                unsafe {
                    if !is_backward(self.op) {
                        let (out, input) = (self.float(0), self.float(self.slots.len() - 1));
                        let x = read(input, plane * ip, ip, &mut a);
                        write(out, plane * op, op, &mut b, |y| {
                            if max {
                                let indices = std::slice::from_raw_parts_mut((self.slots[1].0 as *mut i64).add(plane * op), op);
                                if flat {
                                    return self.max_plane(x, iw, &rows, &cols, y, indices);
                                }
                                for (t, (wd, _)) in deps.iter().enumerate() {
                                    for (r, (wr, _)) in rows.iter().enumerate() {
                                        for (c, (wc, _)) in cols.iter().enumerate() {
                                            let (v, at) = max_window(x, [ih, iw], [wd, wr, wc]);
                                            (y[(t * oh + r) * ow + c], indices[(t * oh + r) * ow + c]) = (v, at as i64);
                                        }
                                    }
                                }
                                return;
                            }
                            for (t, (wd, cd)) in deps.iter().enumerate() {
                                for (r, (wr, cr)) in rows.iter().enumerate() {
                                    for (c, (wc, cc)) in cols.iter().enumerate() {
                                        let mut total = 0.0f32;
                                        for d in wd.start..wd.end {
                                            for h in wr.start..wr.end {
                                                let row = (d * ih + h) * iw;
                                                total += x[row + wc.start..row + wc.end].iter().sum::<f32>();
                                            }
                                        }
                                        let empty = wd.start >= wd.end || wr.start >= wr.end || wc.start >= wc.end;
                                        y[(t * oh + r) * ow + c] = if empty { 0.0 } else { total / divide(cd * cr * cc) };
                                    }
                                }
                            }
                        });
                    } else {
                        let (grad_input, grad_out) = (self.float(0), self.float(1));
                        let dy = read(grad_out, plane * op, op, &mut a);
                        write(grad_input, plane * ip, ip, &mut b, |gi| {
                            gi.fill(0.0);
                            if max {
                                let indices = std::slice::from_raw_parts((self.slots[2].0 as *const i64).add(plane * op), op);
                                for (&at, &g) in indices.iter().zip(dy) {
                                    // An index outside the plane is a caller's error, not a crash.
                                    if let Some(v) = usize::try_from(at).ok().and_then(|at| gi.get_mut(at)) {
                                        *v += g;
                                    }
                                }
                                return;
                            }
                            for (t, (wd, cd)) in deps.iter().enumerate() {
                                for (r, (wr, cr)) in rows.iter().enumerate() {
                                    for (c, (wc, cc)) in cols.iter().enumerate() {
                                        let g = dy[(t * oh + r) * ow + c] / divide(cd * cr * cc);
                                        for d in wd.start..wd.end {
                                            for h in wr.start..wr.end {
                                                let row = (d * ih + h) * iw;
                                                for v in &mut gi[row + wc.start..row + wc.end] {
                                                    *v += g;
                                                }
                                            }
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
    /// One plane of a max pool, `rows` and `cols` the output rows' and columns' windows.
    /// Columns whose window lies inside the input (all but a few at the edges) take their taps
    /// in the same order as [`max_window`], but a tap at a time across all those columns: one
    /// short loop per tap instead of a window walk per output. Edge columns take [`max_window`].
    fn max_plane(&self, x: &[f32], iw: usize, rows: &[(Window, usize)], cols: &[(Window, usize)], y: &mut [f32], indices: &mut [i64]) {
        let s = &self.shape;
        let (k, stride, pad, dil) = (s.kernel[2], s.stride[2], s.padding[2], s.dilation[2]);
        let ow = cols.len();
        // Interior: c * stride - pad >= 0 and c * stride - pad + (k - 1) * dil < iw.
        let lo = ((pad + stride - 1) / stride).clamp(0, ow as i64) as usize;
        let last = iw as i64 - 1 + pad - (k - 1) * dil;
        let hi = if last < 0 { lo } else { (last / stride + 1).clamp(lo as i64, ow as i64) as usize };
        for (r, (wr, _)) in rows.iter().enumerate() {
            for c in (0..lo).chain(hi..ow) {
                let (v, at) = max_window(x, [1, iw], [&Window { start: 0, end: 1, step: 1 }, wr, &cols[c].0]);
                (y[r * ow + c], indices[r * ow + c]) = (v, at as i64);
            }
        }
        let (stride, dil) = (stride as usize, dil as usize);
        let first = |c: usize| (lo + c) * stride - pad as usize; // the window's first column
        if dil == 1 && stride == k as usize && (k == 2 || k == 3) && lo < hi {
            return tiled_max_plane(k as usize, x, iw, rows, first(0), lo..hi, y, indices);
        }
        for (r, (wr, _)) in rows.iter().enumerate() {
            let (y, indices) = (&mut y[r * ow..][lo..hi], &mut indices[r * ow..][lo..hi]);
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
    }
    // ANCHOR_END: max_row

    fn float(&self, k: usize) -> (usize, Dtype) {
        (self.slots[k].0, self.slots[k].1.unwrap_or(Dtype::Float))
    }
}

/// [`Pooling::max_plane`]'s interior columns `span` when the windows tile the rows (stride =
/// kernel = 2 or 3, the usual 2x2 pool): an input row from column `first` is then whole windows
/// side by side, which the compiler loads as vectors and splits by tap. (A window walk per
/// output took 2.5 ns an input element.)
#[allow(clippy::too_many_arguments)]
fn tiled_max_plane(k: usize, x: &[f32], iw: usize, rows: &[(Window, usize)], first: usize, span: std::ops::Range<usize>, y: &mut [f32], indices: &mut [i64]) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { tiled_max_plane_avx512(k, x, iw, rows, first, span, y, indices) },
            Simd::Avx2 => return unsafe { tiled_max_plane_avx2(k, x, iw, rows, first, span, y, indices) },
            Simd::Baseline => {}
        }
    }
    tiled_max_plane_any(k, x, iw, rows, first, span, y, indices)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tiled_max_plane_avx512(k: usize, x: &[f32], iw: usize, rows: &[(Window, usize)], first: usize, span: std::ops::Range<usize>, y: &mut [f32], indices: &mut [i64]) {
    tiled_max_plane_any(k, x, iw, rows, first, span, y, indices)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tiled_max_plane_avx2(k: usize, x: &[f32], iw: usize, rows: &[(Window, usize)], first: usize, span: std::ops::Range<usize>, y: &mut [f32], indices: &mut [i64]) {
    tiled_max_plane_any(k, x, iw, rows, first, span, y, indices)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tiled_max_plane_any(k: usize, x: &[f32], iw: usize, rows: &[(Window, usize)], first: usize, span: std::ops::Range<usize>, y: &mut [f32], indices: &mut [i64]) {
    let ow = y.len() / rows.len().max(1);
    for (r, (wr, _)) in rows.iter().enumerate() {
        let (y, indices) = (&mut y[r * ow..][span.clone()], &mut indices[r * ow..][span.clone()]);
        match (k, wr.end - wr.start == k && wr.step == 1) {
            (2, true) => square::<2>(x, iw, wr.start, first, y, indices),
            (3, true) => square::<3>(x, iw, wr.start, first, y, indices),
            (2, false) => tiled::<2>(x, iw, wr, first, y, indices),
            _ => tiled::<3>(x, iw, wr, first, y, indices),
        }
    }
}

/// Whole `K x K` windows side by side (every row but a padded edge one): each output's window
/// is taken in registers, rows then columns (`max_window`'s order), and stored once. Keeping
/// running maxima in memory across rows stalled each load behind the previous row's masked
/// store.
#[inline(always)]
fn square<const K: usize>(x: &[f32], iw: usize, top: usize, first: usize, y: &mut [f32], indices: &mut [i64]) {
    let n = y.len();
    let rows: [&[[f32; K]]; K] = std::array::from_fn(|i| x[(top + i) * iw + first..][..n * K].as_chunks::<K>().0);
    let base = (top * iw + first) as i64;
    for (c, (y, at)) in y.iter_mut().zip(indices.iter_mut()).enumerate() {
        let (mut best, mut tap) = (f32::NEG_INFINITY, 0u32);
        for (i, row) in rows.iter().enumerate() {
            for (t, &v) in row[c].iter().enumerate() {
                // A later NaN wins, a tie keeps the first, as in `max_window`.
                if v > best || v.is_nan() {
                    (best, tap) = (v, (i * iw + t) as u32);
                }
            }
        }
        (*y, *at) = (best, base + (c * K) as i64 + tap as i64);
    }
}

/// Windows of `K` taps side by side: tap `t` of output `c` is column `first + c * K + t`.
#[inline(always)]
fn tiled<const K: usize>(x: &[f32], iw: usize, wr: &Window, first: usize, y: &mut [f32], indices: &mut [i64]) {
    // 64 outputs at a time; the winning column and row are kept as 32-bit numbers (which
    // vectorise twice as wide as the 64-bit indices, written once at the end), on the stack.
    const CHUNK: usize = 64;
    for (chunk, (y, indices)) in y.chunks_mut(CHUNK).zip(indices.chunks_mut(CHUNK)).enumerate() {
        let first = first + chunk * CHUNK * K;
        let (mut column, mut line) = ([0u32; CHUNK], [0u32; CHUNK]);
        let (column, line) = (&mut column[..y.len()], &mut line[..y.len()]);
        y.fill(f32::NEG_INFINITY);
        for (c, (column, line)) in column.iter_mut().zip(line.iter_mut()).enumerate() {
            (*column, *line) = ((first + c * K) as u32, wr.start as u32);
        }
        for h in (wr.start..wr.end).step_by(wr.step) {
            let windows = x[h * iw + first..][..y.len() * K].as_chunks::<K>().0;
            for (c, ((w, y), (column, line))) in windows.iter().zip(y.iter_mut()).zip(column.iter_mut().zip(line.iter_mut())).enumerate() {
                for (t, &v) in w.iter().enumerate() {
                    // Same order and rule as `max_window`: a later NaN wins, a tie keeps the first.
                    if v > *y || v.is_nan() {
                        (*y, *column, *line) = (v, (first + c * K + t) as u32, h as u32);
                    }
                }
            }
        }
        for ((at, &column), &line) in indices.iter_mut().zip(column.iter()).zip(line.iter()) {
            *at = line as i64 * iw as i64 + column as i64;
        }
    }
}

/// The largest element of a window (a NaN wins; the last one, as on CPU) and its index in the
/// volume of `[height, width]` planes; CPU's first tap when the window is empty.
fn max_window(x: &[f32], [height, width]: [usize; 2], [deps, rows, cols]: [&Window; 3]) -> (f32, usize) {
    let at = |d: usize, h: usize, w: usize| (d * height + h) * width + w;
    let (mut best, mut first) = (f32::NEG_INFINITY, at(deps.start, rows.start, cols.start));
    for d in (deps.start..deps.end).step_by(deps.step) {
        for h in (rows.start..rows.end).step_by(rows.step) {
            for w in (cols.start..cols.end).step_by(cols.step) {
                let v = x[at(d, h, w)];
                if v > best || v.is_nan() {
                    (best, first) = (v, at(d, h, w));
                }
            }
        }
    }
    (best, first)
}
