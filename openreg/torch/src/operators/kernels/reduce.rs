//! Reductions over a TensorIterator built by `make_reduction`: operand 0 is the output, with
//! stride 0 along every reduced dimension; operand 1 is the input. Accumulates in float64.

use std::sync::Mutex;

use super::dtype::{self, Dtype};
use super::integer::{self, Int};
use super::walk::Layout;
use super::{launch, view, unsupported};
use crate::error::Result;
use crate::ffi::ffi::Reduction;

/// Launches a reduction built by `make_reduction` (output first, with 0 strides along the
/// reduced dimensions); `count` is the number of inputs per output, the divisor of a mean.
pub(crate) fn launch_reduction(
    op: Reduction, count: f64, data: &[usize], storages: &[usize], dtypes: &[i8], shape: &[i64],
    strides: &[i64], device: i64,
) -> Result<()> {
    let ints = (Int::from_code(dtypes[0]), Int::from_code(dtypes[1]));
    if let (Some(to), Some(from)) = ints
        && (to, from) != (Int::Bool, Int::Bool)
        && matches!(op, Reduction::Sum | Reduction::Amax | Reduction::Amin)
    {
        let layout = Layout::new(shape, strides, 2);
        let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
        let out = (view(data[0], layout.extent(0, to.size()), storage(0))?, to);
        let input = (view(data[1], layout.extent(1, from.size()), storage(1))?, from);
        let n = layout.numel();
        let work = integer::Reduce { op, out, input, layout };
        return launch(device, n, move || work.run());
    }
    // Bool for maxima and minima only: any() and all() of a bool tensor.
    let dtype = |code| if matches!(op, Reduction::Amax | Reduction::Amin) { Dtype::elementwise(code) } else { Dtype::from_code(code) };
    let (Some(out), Some(input)) = (dtype(dtypes[0]), dtype(dtypes[1])) else {
        return Err(unsupported("this reduction", dtypes[1]));
    };
    let layout = Layout::new(shape, strides, 2);
    let n = layout.numel();
    if n == 0 {
        return Ok(());
    }
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    let out = (view(data[0], layout.extent(0, out.size()), storage(0))?, out);
    let input = (view(data[1], layout.extent(1, input.size()), storage(1))?, input);
    let work = Reduce { op, count, out, input, layout };
    launch(device, n, move || work.run())
}

const BLOCK: usize = 4096;

/// `row[c] += Σ_r x[r * step + c]` over `runs` float32 runs of `row.len()` elements: added in
/// float32 64 runs at a time, then into float64 (a float64 conversion per element cost more
/// than the sum), in the CPU's widest vectors.
///
/// # Safety
/// Every run lies in memory the kernel may read.
unsafe fn add_runs(row: &mut [f64], x: *const f32, step: isize, runs: usize) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        match super::softmax::simd() {
            super::softmax::Simd::Avx512 => return add_runs_avx512(row, x, step, runs),
            super::softmax::Simd::Avx2 => return add_runs_avx2(row, x, step, runs),
            super::softmax::Simd::Baseline => {}
        }
    }
    unsafe { add_runs_any(row, x, step, runs) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn add_runs_avx512(row: &mut [f64], x: *const f32, step: isize, runs: usize) {
    unsafe { add_runs_any(row, x, step, runs) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_runs_avx2(row: &mut [f64], x: *const f32, step: isize, runs: usize) {
    unsafe { add_runs_any(row, x, step, runs) }
}

#[inline(always)]
unsafe fn add_runs_any(row: &mut [f64], x: *const f32, step: isize, runs: usize) {
    let mut partial = vec![0f32; row.len()];
    for first in (0..runs).step_by(64) {
        partial.fill(0.0);
        for r in first..(first + 64).min(runs) {
            // SAFETY: as the caller promises.
            let xs = unsafe { std::slice::from_raw_parts(x.offset(r as isize * step), row.len()) };
            for (p, &x) in partial.iter_mut().zip(xs) {
                *p += x;
            }
        }
        for (a, &p) in row.iter_mut().zip(partial.iter()) {
            *a += f64::from(p);
        }
    }
}
/// Input elements per parallel task of a full reduction.
const CHUNK: usize = 1 << 16;

#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Reduce {
    pub op: Reduction,
    /// Number of input elements per output (the divisor of `mean`).
    pub count: f64,
    pub out: (usize, Dtype),
    pub input: (usize, Dtype),
    pub layout: Layout,
}

/// A running sum or maximum.
#[derive(Clone, Copy)]
struct Acc {
    op: Reduction,
    value: f64,
}

/// The larger (Amax) or smaller (Amin) of two values; NaN wins, as in torch.amax and amin.
fn pick(op: Reduction, a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if op == Reduction::Amax {
        a.max(b)
    } else {
        a.min(b)
    }
}

fn extremum(op: Reduction) -> bool {
    matches!(op, Reduction::Amax | Reduction::Amin)
}

impl Acc {
    fn new(op: Reduction) -> Acc {
        let value = match op {
            Reduction::Amax => f64::NEG_INFINITY,
            Reduction::Amin => f64::INFINITY,
            _ => 0.0,
        };
        Acc { op, value }
    }

    fn add(&mut self, xs: &[f32]) {
        if extremum(self.op) {
            for &x in xs {
                self.value = pick(self.op, self.value, f64::from(x));
                if self.value.is_nan() {
                    return;
                }
            }
        } else {
            // Each block summed in float32 lanes, its total added in float64, which keeps
            // 16M-element sums accurate.
            for block in xs.chunks(BLOCK) {
                self.value += f64::from(block_sum(block));
            }
        }
    }

    fn merge(mut self, other: Acc) -> Acc {
        if extremum(self.op) {
            self.value = pick(self.op, self.value, other.value);
        } else {
            self.value += other.value;
        }
        self
    }
}

impl Reduce {
    pub(crate) fn run(&self) {
        let ndim = self.layout.shape.len();
        // Split the dimensions into kept (the output moves along them) and reduced.
        let (mut kept, mut reduced) = (Vec::new(), Vec::new());
        for d in 0..ndim {
            if self.layout.shape[d] > 1 {
                if self.layout.strides[d][0] == 0 { reduced.push(d) } else { kept.push(d) }
            }
        }
        let sub = |dims: &[usize]| Layout {
            shape: dims.iter().map(|&d| self.layout.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.layout.strides[d]).collect(),
        };
        let (kept, reduced) = (sub(&kept), sub(&reduced));
        let (outputs, per_output) = (kept.numel(), reduced.numel());
        if outputs == 0 {
            return;
        }
        if outputs == 1 {
            // One output: each thread reduces a slice of the input; the partial results merge.
            let threads = super::thread_pool::threads().min(per_output / CHUNK).max(1);
            let part = per_output.div_ceil(threads);
            let partial: Vec<Mutex<Acc>> = (0..threads).map(|_| Mutex::new(Acc::new(self.op))).collect();
            super::thread_pool::run(threads, |p| {
                let start = p * part;
                let mut buf = [0f32; BLOCK];
                let acc = self.accumulate(&reduced, 0, start, part.min(per_output.saturating_sub(start)), &mut buf);
                *partial[p].lock().unwrap_or_else(|e| e.into_inner()) = acc;
            });
            let total = partial
                .into_iter()
                .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
                .fold(Acc::new(self.op), Acc::merge);
            return self.write(0, total);
        }
        // A kept dimension along which the input is contiguous (`x.sum(0)` of a matrix): add
        // whole input rows into a row of accumulators instead of walking each output's column.
        let item = self.input.1.size() as i64 as isize;
        if let Some(d) = (0..ndim).find(|&d| {
            let (s, n) = (self.layout.strides[d], self.layout.shape[d]);
            n > 1 && s[0] != 0 && s[1] == item
        }) {
            let mut layout = self.layout.clone();
            layout.shape.swap(0, d);
            layout.strides.swap(0, d);
            return self.rows(layout, outputs);
        }
        // Many outputs: each thread computes whole outputs.
        super::elementwise::parallel_min(outputs, (CHUNK / per_output.max(1)).max(1), |start, count| {
            // One buffer per part: zeroing 16 KiB per output cost more than rows of 16 do.
            let mut buf = [0f32; BLOCK];
            // One walk over this part's outputs, a run along the first kept dimension at a time.
            let step = kept.strides[0];
            kept.walk(start, count, |offsets, len| {
                for i in 0..len as isize {
                    let acc = self.accumulate(&reduced, offsets[1] + i * step[1], 0, per_output, &mut buf);
                    self.write(offsets[0] + i * step[0], acc);
                }
            });
        });
    }

    /// Walks the whole input in memory order, adding each run along the (kept) fastest
    /// dimension into `acc`, indexed by the output's position among the kept dimensions.
    fn rows(&self, mut layout: Layout, outputs: usize) {
        // Operand 2 of this layout: the index into `acc` (compact over the kept dimensions).
        let mut step = 1isize;
        let mut kept_dims = Vec::new();
        for d in 0..layout.shape.len() {
            let is_kept = layout.strides[d][0] != 0 && layout.shape[d] > 1;
            layout.strides[d][2] = if is_kept { step } else { 0 };
            if is_kept {
                step *= layout.shape[d] as isize;
                kept_dims.push(d);
            }
        }
        let kept = Layout {
            shape: kept_dims.iter().map(|&d| layout.shape[d]).collect(),
            strides: kept_dims.iter().map(|&d| layout.strides[d]).collect(),
        };
        let init = Acc::new(self.op).value;
        let mut acc = vec![init; outputs];
        let mut buf = [0f32; BLOCK];
        let (base, dtype) = self.input;
        let (stride, acc_stride) = (layout.strides[0][1], layout.strides[0][2]);
        // The runs along dimension 0, one per position of the others: walked as a layout of
        // their own, with a tight loop over its first dimension, so that short runs (8 kept
        // elements, reduced 1,536 times) do not pay the walk's bookkeeping each.
        let len = layout.shape[0];
        let others = if layout.shape.len() > 1 {
            Layout { shape: layout.shape[1..].into(), strides: layout.strides[1..].into() }
        } else {
            Layout { shape: smallvec::smallvec![1], strides: smallvec::smallvec![[0; super::walk::MAX_OPERANDS]] }
        };
        let step = others.strides[0];
        let sum = !extremum(self.op);
        others.walk(0, others.numel(), |offsets, runs| {
            // Runs that add into one row of `acc` (dimension 0 of the others is reduced), of
            // float32 and short: added in float32, 64 runs at a time, then into float64 (a
            // float64 conversion per element cost more than the sum).
            if sum && step[2] == 0 && dtype == Dtype::Float && stride == 4 && len <= BLOCK {
                let row = &mut acc[offsets[2] as usize..offsets[2] as usize + len];
                // Columns split over the kernel threads when there is enough to add.
                let parts = if runs * len >= 1 << 16 { super::thread_pool::threads().min(len / 64).max(1) } else { 1 };
                let columns: Vec<_> = row.chunks_mut(len.div_ceil(parts)).map(Mutex::new).collect();
                let width = len.div_ceil(parts);
                super::thread_pool::run(columns.len(), |p| {
                    let mut row = columns[p].lock().unwrap_or_else(|e| e.into_inner());
                    let first = base as isize + offsets[1] + (p * width * 4) as isize;
                    // SAFETY: C++ checked the input's extent; these runs lie inside it.
                    unsafe { add_runs(&mut row, first as *const f32, step[1] / 4, runs) };
                });
                return;
            }
            for r in 0..runs as isize {
                let (from, into) = (offsets[1] + r * step[1], offsets[2] + r * step[2]);
                let mut done = 0;
                while done < len {
                    let n = (len - done).min(BLOCK);
                    let src = (base as isize + from + done as isize * stride) as *const u8;
                    // SAFETY: C++ checked the input's extent against its storage.
                    let xs: &[f32] = if dtype == Dtype::Float && stride == 4 {
                        unsafe { std::slice::from_raw_parts(src.cast::<f32>(), n) }
                    } else {
                        unsafe { dtype::load(dtype, src, stride, &mut buf[..n]) };
                        &buf[..n]
                    };
                    // acc_stride is 1: the run is along the kept, contiguous dimension.
                    let first = (into + done as isize * acc_stride) as usize;
                    let row = &mut acc[first..first + n];
                    if extremum(self.op) {
                        for (a, &x) in row.iter_mut().zip(xs) {
                            *a = pick(self.op, *a, f64::from(x));
                        }
                    } else {
                        for (a, &x) in row.iter_mut().zip(xs) {
                            *a += f64::from(x);
                        }
                    }
                    done += n;
                }
            }
        });
        let mut o = 0;
        let step = kept.strides.first().map_or(0, |s| s[0]);
        kept.walk(0, outputs, |offsets, len| {
            let values = &acc[o..o + len];
            o += len;
            if self.out.1 == Dtype::Float && step == 4 {
                // A contiguous float32 run of outputs: one tight loop, not a dispatch per value.
                // SAFETY: C++ checked the output's extent against its live allocation.
                let out = unsafe { std::slice::from_raw_parts_mut((self.out.0 as isize + offsets[0]) as *mut f32, len) };
                if self.op == Reduction::Mean {
                    for (d, &v) in out.iter_mut().zip(values) {
                        *d = (v / self.count) as f32;
                    }
                } else {
                    for (d, &v) in out.iter_mut().zip(values) {
                        *d = v as f32;
                    }
                }
                return;
            }
            for (i, &value) in values.iter().enumerate() {
                self.write(offsets[0] + i as isize * step, Acc { op: self.op, value });
            }
        });
    }

    /// Accumulates `count` input elements of the reduced space from linear index `start`,
    /// with the input starting `at` bytes past its base.
    /// `buf`: room to convert a block of the input to float32.
    fn accumulate(&self, reduced: &Layout, at: isize, start: usize, count: usize, buf: &mut [f32; BLOCK]) -> Acc {
        let mut acc = Acc::new(self.op);
        let (base, dtype) = self.input;
        let stride = reduced.strides.first().map_or(0, |s| s[1]);
        // One or two reduced dimensions, the first a contiguous float32 run (`x.sum(-1)` over
        // short rows, or over the batch and the last dimension): no walk to set up, and short
        // runs added in float64 directly.
        let (shape, strides) = (&reduced.shape[..], &reduced.strides[..]);
        if dtype == Dtype::Float
            && (1..=2).contains(&shape.len())
            && strides[0][1] == 4
            && start == 0
            && count == reduced.numel()
        {
            let (n, outer, step) = (shape[0], shape.get(1).copied().unwrap_or(1), strides.get(1).map_or(0, |s| s[1]));
            for j in 0..outer as isize {
                // SAFETY: C++ checked the input's extent against its live allocation.
                let xs = unsafe { std::slice::from_raw_parts((base as isize + at + j * step) as *const f32, n) };
                if n <= 64 && !extremum(self.op) {
                    acc.value += xs.iter().map(|&x| f64::from(x)).sum::<f64>();
                } else {
                    acc.add(xs);
                }
            }
            return acc;
        }
        reduced.walk(start, count, |offsets, len| {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(BLOCK);
                let src = (base as isize + at + offsets[1] + done as isize * stride) as *const u8;
                // SAFETY: C++ checked the input's extent against its live allocation.
                if dtype == Dtype::Float && stride == 4 {
                    acc.add(unsafe { std::slice::from_raw_parts(src.cast::<f32>(), n) });
                } else {
                    unsafe { dtype::load(dtype, src, stride, &mut buf[..n]) };
                    acc.add(&buf[..n]);
                }
                done += n;
            }
        });
        acc
    }

    fn write(&self, at: isize, acc: Acc) {
        let value = match self.op {
            Reduction::Mean => acc.value / self.count,
            _ => acc.value,
        };
        let (base, dtype) = self.out;
        let to = (base as isize + at) as *mut u8;
        // SAFETY: C++ checked the output's extent against its live allocation.
        unsafe {
            if dtype == Dtype::Float {
                // One element at a time: the general store's dispatch would cost more than it.
                to.cast::<f32>().write_unaligned(value as f32);
            } else {
                dtype::store(dtype, to, 0, &[value as f32]);
            }
        }
    }
}

/// The sum of a block: four chains of sixteen lanes (one register each with AVX-512), compiled
/// for the widest SIMD. With one chain, in code built for the baseline (SSE2), each addition
/// waited for the one before: about 4 elements a cycle, so a 16M-element sum was bound by the
/// additions (0.9 ms) where the CPU's was bound by memory (0.7 ms when memory was quick).
fn block_sum(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { block_sum_avx512(xs) },
            Simd::Avx2 => return unsafe { block_sum_avx2(xs) },
            Simd::Baseline => {}
        }
    }
    block_sum_any(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn block_sum_avx512(xs: &[f32]) -> f32 {
    block_sum_any(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_sum_avx2(xs: &[f32]) -> f32 {
    block_sum_any(xs)
}

#[inline(always)]
fn block_sum_any(xs: &[f32]) -> f32 {
    let mut acc = [[0f32; 16]; 4];
    let (chunks, rest) = xs.as_chunks::<64>();
    for c in chunks {
        for (j, acc) in acc.iter_mut().enumerate() {
            for i in 0..16 {
                acc[i] += c[j * 16 + i];
            }
        }
    }
    // Stored once as a whole: without this the compiler packs the running sums as narrower
    // vectors, to suit the additions across lanes below (as in softmax and norm).
    let acc = std::hint::black_box(acc);
    let lanes: [f32; 16] = std::array::from_fn(|i| (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]));
    let half: [f32; 8] = std::array::from_fn(|i| lanes[i] + lanes[i + 8]);
    let quarter: [f32; 4] = std::array::from_fn(|i| half[i] + half[i + 4]);
    (quarter[0] + quarter[2]) + (quarter[1] + quarter[3]) + rest.iter().sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sum_matches_a_float64_sum() {
        // Every remainder of the 64-element chunks, and whole blocks.
        for n in (0..200).chain([4095, 4096]) {
            let xs: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1000) as f32) / 100.0 - 5.0).collect();
            let want: f64 = xs.iter().map(|&x| f64::from(x)).sum();
            for got in [block_sum(&xs), block_sum_any(&xs)] {
                assert!((f64::from(got) - want).abs() <= 1e-4 * want.abs().max(1.0), "{n}: {got} against {want}");
            }
        }
    }
}
