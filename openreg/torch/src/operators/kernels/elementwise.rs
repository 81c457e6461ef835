//! Elementwise kernels over a TensorIterator's operands: output first, then the inputs, each
//! with its own dtype and byte strides (broadcasting is a 0 stride). Each run along the fastest
//! dimension is converted to float32 in blocks, computed, and converted back; float32
//! contiguous runs are read and written in place.

use openreg_runtime as rt;
use rayon::prelude::*;

use super::dtype::{self, Dtype};
use super::integer;
use super::math;
use super::walk::{self, Layout};
use super::{launch, view, dense};
use crate::error::Result;
use crate::ffi::ffi::{Dense, Pointwise};

/// Elements per parallel chunk: below this a kernel runs on the stream's worker alone.
const CHUNK: usize = 1 << 16;

// ANCHOR: abs
/// `dst[i] = |src[i]|` for `n` contiguous float32 elements on `device`.
pub(crate) fn launch_abs_f32(dst: usize, src: usize, n: usize, device: i64) -> Result<()> {
    if n == 0 {
        return Ok(()); // empty tensors may have no memory at all
    }
    let bytes = n * std::mem::size_of::<f32>();
    let (dst, src) = (rt::host_view(dst as *const u8, bytes)? as usize, rt::host_view(src as *const u8, bytes)? as usize);
    let stream = rt::current_stream(device)?;
    stream.launch(move || {
        // SAFETY: both ranges were checked to lie in live device allocations, which the
        // caching allocator does not hand out again before this stream has run this task.
        let (src, dst) = unsafe {
            (std::slice::from_raw_parts(src as *const f32, n), std::slice::from_raw_parts_mut(dst as *mut f32, n))
        };
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                *d = s.abs();
            }
        });
    })?;
    Ok(())
}
// ANCHOR_END: abs

/// True if [`launch_pointwise`] computes `op` with these operand dtypes (output first):
/// float32, float16 and bfloat16 in any mix (integer and bool inputs read as float32), and
/// copies of any dtype to the same dtype.
fn pointwise_supported(op: Pointwise, dtypes: &[i8]) -> bool {
    let Some(inputs) = arity(op) else { return false };
    if dtypes.len() != inputs + 1 {
        return false;
    }
    (Dtype::elementwise(dtypes[0]).is_some() && dtypes[1..].iter().all(|&d| Dtype::elementwise_input(d).is_some()))
        || (op == Pointwise::Copy && dtypes[0] == dtypes[1] && dtype::item_size(dtypes[0]).is_some())
}

// ANCHOR: launch_pointwise
/// Launches `op` over TensorIterator-shaped operands: `data`, `dtypes` and the `[operand][dim]`
/// byte `strides` list the output first; an input whose address is 0 is the CPU scalar
/// `constants[k]` instead. `scalar` is alpha, the threshold, or the fill value (`scalar2`: a
/// second one, hardtanh's upper bound). Returns false, having done nothing, if the kernels do
/// not compute `op` in these dtypes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_pointwise(
    op: Pointwise, scalar: f64, scalar2: f64, data: &[usize], storages: &[usize], dtypes: &[i8], constants: &[f64],
    shape: &[i64], strides: &[i64], device: i64,
) -> Result<bool> {
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    if arity(op) == dtypes.len().checked_sub(1) && integer::applies(op, dtypes) && data.len() <= walk::MAX_OPERANDS {
        return integer::launch_integer(op, [scalar, scalar2], data, storages, dtypes, constants, shape, strides, device);
    }
    if op == Pointwise::Copy && dtypes.len() == 2 && !pointwise_supported(op, dtypes) && !data.contains(&0) {
        // A dtype change these kernels do not compute in (to float64, an integer, bool).
        let layout = Layout::new(shape, strides, 2);
        return super::convert::launch_convert(layout, (data[0], storage(0)), (data[1], storage(1)), dtypes[0], dtypes[1], device);
    }
    if !pointwise_supported(op, dtypes) || data.len() > walk::MAX_OPERANDS {
        return Ok(false);
    }
    // Contiguous float32 operands, the common case, are one run of memory each.
    let dense = shape.len() == 1 && strides.iter().all(|&s| s == 4) && !data.contains(&0);
    if dense && dtypes.iter().all(|&d| Dtype::from_code(d) == Some(Dtype::Float)) {
        let n = shape[0].max(0) as usize;
        let mut at = [view(data[0], n * 4, storage(0))?; 4]; // the output stands in for absent inputs
        for k in 1..data.len() {
            at[k] = view(data[k], n * 4, storage(k))?;
        }
        launch_dense_f32(op, [scalar, scalar2], at, n, device)?;
        return Ok(true);
    }
    let layout = Layout::new(shape, strides, data.len());
    let n = layout.numel();
    if n == 0 {
        return Ok(true);
    }
    // A same-dtype copy of a dtype we do not compute in moves raw elements of its size.
    if Dtype::elementwise(dtypes[0]).is_none() {
        let size = dtype::item_size(dtypes[0]).unwrap_or(1);
        let (dst, src) = (view(data[0], layout.extent(0, size), storage(0))?, view(data[1], layout.extent(1, size), storage(1))?);
        launch(device, n, move || copy_raw(&layout, dst, src, size))?;
        return Ok(true);
    }
    let dtype_of = |k: usize| Dtype::elementwise(dtypes[k]).unwrap_or(Dtype::Float);
    let out = (view(data[0], layout.extent(0, dtype_of(0).size()), storage(0))?, dtype_of(0));
    let mut inputs = smallvec::SmallVec::new();
    for k in 1..data.len() {
        inputs.push(match data[k] {
            0 => Source::Constant(constants.get(k).copied().unwrap_or(0.0) as f32),
            ptr => {
                let dtype = Dtype::elementwise_input(dtypes[k]).unwrap_or(Dtype::Float);
                Source::Memory { base: view(ptr, layout.extent(k, dtype.size()), storage(k))?, dtype }
            }
        });
    }
    let work = Elementwise { op, scalars: [scalar as f32, scalar2 as f32], out, inputs, layout };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_pointwise

// ANCHOR: launch_same_shape
/// Launches `op` over contiguous float32 operands of one shape, output first (`b` is not read
/// by unary operations): the short way that `same_shape` in Structured.h takes without a
/// TensorIterator. False, having done nothing, if an operand is not float32 or not that size.
pub(crate) fn launch_same_shape(op: Pointwise, scalar: f64, out: Dense, a: Dense, b: Dense, device: i64) -> Result<bool> {
    let Some(inputs) = arity(op).filter(|&k| k > 0 && k <= 2) else { return Ok(false) };
    let operands = &[out, a, b][..=inputs];
    if operands.iter().any(|t| Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != out.numel) {
        return Ok(false);
    }
    let mut at = [dense(&out, Dtype::Float)?; 4]; // the output stands in for absent inputs
    for k in 1..operands.len() {
        at[k] = dense(&operands[k], Dtype::Float)?;
    }
    launch_dense_f32(op, [scalar, 0.0], at, out.numel, device)?;
    Ok(true)
}

/// Queues `op` over `n` float32 elements at runtime addresses `at`, output first.
fn launch_dense_f32(op: Pointwise, scalars: [f64; 2], at: [usize; 4], n: usize, device: i64) -> Result<()> {
    if n == 0 {
        return Ok(()); // empty tensors may have no memory at all
    }
    launch(device, n, move || run_dense_f32(op, scalars.map(|s| s as f32), at, n))
}
// ANCHOR_END: launch_same_shape

// ANCHOR: launch_broadcast
/// Launches a binary `op` over contiguous float32 operands where one input, `part`, is
/// broadcast in one block: output element `i` reads `full[i]` and
/// `part[(i / inner) % part.numel]` (`broadcast_inner` in Structured.h finds `inner`).
/// `part_first`: `part` is the operation's first input. False, having done nothing, if `op`
/// is not binary, an operand is not float32, or the sizes do not tile the output.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_broadcast(
    op: Pointwise, scalar: f64, out: Dense, full: Dense, part: Dense, part_first: bool, inner: usize, device: i64,
) -> Result<bool> {
    let (n, period) = (out.numel, part.numel);
    let floats = [out, full, part].iter().all(|t| Dtype::from_code(t.dtype) == Some(Dtype::Float));
    if arity(op) != Some(2) || !floats || full.numel != n || inner == 0 || period == 0 || n % (inner * period) != 0 {
        return Ok(false);
    }
    let (o, full, part) = (dense(&out, Dtype::Float)?, dense(&full, Dtype::Float)?, dense(&part, Dtype::Float)?);
    let shape = Broadcast { n, inner, period, part_first };
    if n > 0 {
        launch(device, n, move || shape.run(op, [scalar as f32, 0.0], o, full, part))?;
    }
    Ok(true)
}

/// The index space of [`launch_broadcast`].
#[derive(Debug, Clone, Copy)]
struct Broadcast {
    n: usize,
    inner: usize,
    period: usize,
    part_first: bool,
}

impl Broadcast {
    /// Blocks of up to [`BLOCK`] output elements, each against a buffer holding the elements
    /// of `part` it reads, so that the loops are the vector loops over two arrays. A row of
    /// `part` at least a block long is read in place.
    fn run(self, op: Pointwise, scalars: [f32; 2], o: usize, full: usize, part: usize) {
        let at = |addr: usize, i: usize| (addr as *const f32).wrapping_add(i);
        parallel(self.n, |start, count| {
            let mut buffer = [0f32; BLOCK];
            let (mut i, end) = (start, start + count);
            while i < end {
                let mut len = BLOCK.min(end - i);
                let (first, p) = (i / self.inner, (i / self.inner) % self.period);
                let read = if self.inner == 1 && self.period >= BLOCK {
                    len = len.min(self.period - p); // up to the row's end
                    at(part, p)
                } else {
                    let mut j = 0;
                    while j < len {
                        let k = (i + j) / self.inner;
                        let q = if k == first { p } else { k % self.period };
                        // SAFETY: `q` and the run stay inside `part`'s `period` elements.
                        let run = if self.inner == 1 {
                            let run = (self.period - q).min(len - j);
                            unsafe { std::ptr::copy_nonoverlapping(at(part, q), buffer.as_mut_ptr().add(j), run) };
                            run
                        } else {
                            let run = ((k + 1) * self.inner - (i + j)).min(len - j);
                            buffer[j..j + run].fill(unsafe { *at(part, q) });
                            run
                        };
                        j += run;
                    }
                    buffer.as_ptr()
                };
                let ins = if self.part_first { [read, at(full, i), read] } else { [at(full, i), read, read] };
                // SAFETY: the launch checked n elements of `o` and `full`; `read` has `len`.
                unsafe { compute(op, scalars, ins, at(o, i).cast_mut(), len) };
                i += len;
            }
        });
    }
}
// ANCHOR_END: launch_broadcast

/// Same-dtype copy of elements of `size` bytes, run by run.
fn copy_raw(layout: &Layout, dst: usize, src: usize, size: usize) {
    let (ds, ss) = (layout.strides[0][0], layout.strides[0][1]);
    layout.walk(0, layout.numel(), |o, len| {
        for i in 0..len as isize {
            // SAFETY: both extents were checked against live allocations at launch.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (src as isize + o[1] + i * ss) as *const u8,
                    (dst as isize + o[0] + i * ds) as *mut u8,
                    size,
                )
            };
        }
    });
}

/// Elements converted and computed at a time (the float32 buffers stay in L1).
pub(crate) const BLOCK: usize = 512;
/// The smallest part worth a thread of its own (waking one costs microseconds).
const PARALLEL: usize = 1 << 15;
/// Rows shorter than this are computed a block of rows at a time ([`Elementwise::run_short_rows`]).
const SHORT_ROW: usize = 32;

// ANCHOR: parallel
/// Splits `0..n` into one part per thread (none smaller than [`PARALLEL`]) and runs
/// `f(start, count)` on each, the first on the calling thread (see `thread_pool.rs`).
pub(crate) fn parallel(n: usize, f: impl Fn(usize, usize) + Sync) {
    parallel_min(n, PARALLEL, f)
}

/// [`parallel`] with parts of at least `min` items.
pub(crate) fn parallel_min(n: usize, min: usize, f: impl Fn(usize, usize) + Sync) {
    let parts = super::thread_pool::threads().min(n / min.max(1)).max(1);
    let part = n.div_ceil(parts);
    super::thread_pool::run(parts, |p| {
        let start = p * part;
        f(start, part.min(n.saturating_sub(start)));
    });
}
// ANCHOR_END: parallel

thread_local! {
    /// Per-thread conversion buffers (three inputs, one output), zeroed once, not per call.
    static SCRATCH: std::cell::RefCell<Box<[[f32; BLOCK]; 4]>> =
        std::cell::RefCell::new(Box::new([[0.0; BLOCK]; 4]));
}

/// Where an input's elements come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// Device memory (a runtime-view address) in `dtype`.
    Memory { base: usize, dtype: Dtype },
    /// One value for every element: a CPU scalar such as the `2` in `x + 2`.
    Constant(f32),
}

/// One elementwise operation, ready to run on a stream's worker.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Elementwise {
    pub op: Pointwise,
    /// The operation's scalars (alpha, a threshold, hardtanh's bounds).
    pub scalars: [f32; 2],
    pub out: (usize, Dtype),
    pub inputs: smallvec::SmallVec<[Source; 3]>,
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
        | Pointwise::Tanh
        | Pointwise::Silu
        | Pointwise::Gelu
        | Pointwise::LeakyRelu
        | Pointwise::Sqrt
        | Pointwise::Reciprocal
        | Pointwise::Log
        | Pointwise::Hardtanh
        | Pointwise::Sign
        | Pointwise::Rsqrt
        | Pointwise::Erfinv
        | Pointwise::Sin
        | Pointwise::Cos
        | Pointwise::PowScalar
        | Pointwise::ClampMin
        | Pointwise::ClampMax
        | Pointwise::Hardswish
        | Pointwise::Hardsigmoid
        | Pointwise::Softplus
        | Pointwise::IsNegInf
        | Pointwise::IsPosInf
        | Pointwise::LogicalNot
        | Pointwise::Log1p
        | Pointwise::Threshold
        | Pointwise::Hardshrink
        | Pointwise::Softshrink
        | Pointwise::Mish
        | Pointwise::Clamp
        | Pointwise::Elu
        | Pointwise::Celu
        | Pointwise::BitwiseNot
        | Pointwise::LogSigmoid
        | Pointwise::Floor
        | Pointwise::Ceil
        | Pointwise::Trunc
        | Pointwise::Log2 => 1,
        Pointwise::Add
        | Pointwise::Mul
        | Pointwise::Div
        | Pointwise::Maximum
        | Pointwise::Minimum
        | Pointwise::ThresholdBackward
        | Pointwise::SiluBackward
        | Pointwise::GeluBackward
        | Pointwise::LeakyReluBackward
        | Pointwise::HardtanhBackward
        | Pointwise::Lerp
        | Pointwise::Eq
        | Pointwise::Ne
        | Pointwise::Lt
        | Pointwise::Le
        | Pointwise::Gt
        | Pointwise::Ge
        | Pointwise::LogicalAnd
        | Pointwise::LogicalOr
        | Pointwise::MaskedFill
        | Pointwise::SigmoidBackward
        | Pointwise::TanhBackward
        | Pointwise::HardswishBackward
        | Pointwise::HardsigmoidBackward
        | Pointwise::SoftplusBackward
        | Pointwise::ShrinkBackward
        | Pointwise::Xlogy
        | Pointwise::EluBackward
        | Pointwise::CeluBackward
        | Pointwise::BitwiseAnd
        | Pointwise::BitwiseOr
        | Pointwise::BitwiseXor
        | Pointwise::LogSigmoidBackward
        | Pointwise::DivFloor
        | Pointwise::DivTrunc => 2,
        Pointwise::Addcmul | Pointwise::Addcdiv | Pointwise::Where | Pointwise::Addr => 3,
        _ => return None,
    })
}

impl Elementwise {
    /// Runs the whole operation, in parallel chunks when it is large.
    pub(crate) fn run(&self) {
        if self.run_rows() || self.run_transposed() {
            return;
        }
        let n = self.layout.numel();
        parallel(n, |start, count| self.run_range(start, count));
    }

    // ANCHOR: rows
    /// Short rows in two dimensions, every memory operand float32 and, along the rows,
    /// contiguous or (an input) constant: a bias added to each row, rows scaled by their own
    /// factors, a transposed block copied. The general walk pays its bookkeeping per row, which
    /// made `s - max` over attention's rows of 16 eight times the CPU's time; here a row is
    /// one call of the arithmetic, a constant input a filled row. False if it does not apply.
    fn run_rows(&self) -> bool {
        let l = &self.layout;
        if l.shape.len() < 2 || !(2..=BLOCK).contains(&l.shape[0]) || self.out.1 != Dtype::Float || l.strides[0][0] != 4 {
            return false;
        }
        let along = |k: usize| l.strides[0][k + 1];
        let simple = self.inputs.iter().enumerate().all(|(k, s)| match s {
            Source::Memory { dtype, .. } => *dtype == Dtype::Float && matches!(along(k), 0 | 4),
            Source::Constant(_) => true,
        });
        if !simple {
            return false;
        }
        // The rows are the elements of the other dimensions, walked as a layout of their own.
        let rows = Layout { shape: l.shape[1..].into(), strides: l.strides[1..].into() };
        let inner = l.shape[0];
        if inner < SHORT_ROW {
            self.run_short_rows(&rows, inner);
            return true;
        }
        parallel_min(rows.numel(), (PARALLEL / inner).max(1), |start, count| {
            let mut filled = [[0f32; BLOCK]; 3];
            for (k, s) in self.inputs.iter().enumerate() {
                if let Source::Constant(v) = *s {
                    filled[k][..inner].fill(v);
                }
            }
            rows.walk(start, count, |offsets, len| for r in 0..len as isize {
                let at = |k: usize, base: usize| (base as isize + offsets[k] + r * rows.strides[0][k]) as *mut f32;
                for (k, s) in self.inputs.iter().enumerate() {
                    if let (Source::Memory { base, .. }, 0) = (*s, along(k)) {
                        // SAFETY: C++ checked every operand's extent against its allocation.
                        filled[k][..inner].fill(unsafe { *at(k + 1, base) });
                    }
                }
                let mut ins = [filled[0].as_ptr(), filled[1].as_ptr(), filled[2].as_ptr()];
                for (k, s) in self.inputs.iter().enumerate() {
                    if let (Source::Memory { base, .. }, 4) = (*s, along(k)) {
                        ins[k] = at(k + 1, base);
                    }
                }
                // SAFETY: as above; rows of the output are disjoint.
                unsafe { compute(self.op, self.scalars, ins, at(0, self.out.0), inner) };
            });
        });
        true
    }
    // ANCHOR_END: rows

    /// A float32 copy whose output runs along a dimension the input crosses at a stride, while
    /// the input runs along another (`x.transpose(1, 2).contiguous()`): copied in 16 x 16
    /// tiles, so that both sides are read and written a cache line at a time, where the
    /// general walk gathered one element per stride. False if it does not apply.
    fn run_transposed(&self) -> bool {
        let l = &self.layout;
        let Some(&Source::Memory { base, dtype: Dtype::Float }) = self.inputs.first() else { return false };
        if self.op != Pointwise::Copy || self.out.1 != Dtype::Float || l.shape.len() < 2 || l.strides[0][0] != 4 {
            return false;
        }
        let Some(d) = (1..l.shape.len()).find(|&d| l.strides[d][1] == 4 && l.shape[d] > 1) else { return false };
        let kept: Vec<usize> = (1..l.shape.len()).filter(|&k| k != d).collect();
        let others = if kept.is_empty() {
            Layout { shape: smallvec::smallvec![1], strides: smallvec::smallvec![[0; super::walk::MAX_OPERANDS]] }
        } else {
            Layout { shape: kept.iter().map(|&k| l.shape[k]).collect(), strides: kept.iter().map(|&k| l.strides[k]).collect() }
        };
        let (rows, cols) = (l.shape[0], l.shape[d]);
        // Strides in elements: the output's along `d`, the input's along dimension 0.
        let (out_step, in_step) = (l.strides[d][0] / 4, l.strides[0][1] / 4);
        let step = others.strides[0];
        parallel_min(others.numel(), (PARALLEL / (rows * cols)).max(1), |start, count| {
            others.walk(start, count, |offsets, len| {
                for r in 0..len as isize {
                    let out = (self.out.0 as isize + offsets[0] + r * step[0]) as *mut f32;
                    let input = (base as isize + offsets[1] + r * step[1]) as *const f32;
                    for i0 in (0..rows).step_by(16) {
                        for j0 in (0..cols).step_by(16) {
                            for j in j0..(j0 + 16).min(cols) {
                                for i in i0..(i0 + 16).min(rows) {
                                    // SAFETY: C++ checked both operands' extents for this layout;
                                    // parts write disjoint elements of the output.
                                    unsafe {
                                        *out.offset(i as isize + j as isize * out_step) = *input.offset(i as isize * in_step + j as isize);
                                    }
                                }
                            }
                        }
                    }
                }
            });
        });
        true
    }

    /// [`Elementwise::run_rows`] for rows shorter than [`SHORT_ROW`] (`x * scale` with a
    /// scale per row of 8): a call of the arithmetic per row cost more than the row's
    /// elements, so a block of rows is one call. Within a run of equally spaced rows, an
    /// operand whose rows lie back to back is used where it is; the others are gathered.
    fn run_short_rows(&self, rows: &Layout, inner: usize) {
        let along = |k: usize| self.layout.strides[0][k];
        let packed = |k: usize| rows.strides[0][k] == (inner * 4) as isize && along(k) == 4;
        let per_block = BLOCK / inner;
        parallel_min(rows.numel(), (PARALLEL / inner).max(1), |start, count| {
            SCRATCH.with_borrow_mut(|scratch| {
                let [a, b, c, o] = &mut **scratch;
                let mut bufs = [a, b, c];
                for (k, s) in self.inputs.iter().enumerate() {
                    if let Source::Constant(v) = *s {
                        bufs[k].fill(v);
                    }
                }
                rows.walk(start, count, |offsets, len| {
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(per_block);
                        // Operand k's address of row `done + r` of this run.
                        let row = |k: usize, base: usize, r: usize| {
                            (base as isize + offsets[k] + (done + r) as isize * rows.strides[0][k]) as *mut f32
                        };
                        let mut ins = [bufs[0].as_ptr(), bufs[1].as_ptr(), bufs[2].as_ptr()];
                        for (k, s) in self.inputs.iter().enumerate() {
                            let Source::Memory { base, .. } = *s else { continue };
                            // SAFETY: C++ checked every operand's extent against its allocation.
                            unsafe {
                                if packed(k + 1) {
                                    ins[k] = row(k + 1, base, 0);
                                } else if along(k + 1) == 0 {
                                    for r in 0..n {
                                        bufs[k][r * inner..(r + 1) * inner].fill(*row(k + 1, base, r));
                                    }
                                } else {
                                    for r in 0..n {
                                        copy_short(row(k + 1, base, r), bufs[k][r * inner..].as_mut_ptr(), inner);
                                    }
                                }
                            }
                        }
                        // SAFETY: as above; each part writes its own rows of the output.
                        unsafe {
                            if packed(0) {
                                compute(self.op, self.scalars, ins, row(0, self.out.0, 0), n * inner);
                            } else {
                                compute(self.op, self.scalars, ins, o.as_mut_ptr(), n * inner);
                                for r in 0..n {
                                    copy_short(o[r * inner..].as_ptr(), row(0, self.out.0, r), inner);
                                }
                            }
                        }
                        done += n;
                    }
                });
            });
        });
    }

    fn run_range(&self, start: usize, count: usize) {
        SCRATCH.with_borrow_mut(|scratch| {
            let [a, b, c, o] = &mut **scratch;
            // Constants are loaded once.
            for (k, buf) in [&mut *a, &mut *b, &mut *c].into_iter().enumerate() {
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
                    unsafe { self.block(&at, n, [&mut *a, &mut *b, &mut *c], o) };
                    done += n;
                }
            });
        });
    }

    /// Computes `n` elements whose operand byte offsets are `at(k)`. A float32 operand with
    /// unit stride is used where it lies; any other goes through a float32 buffer.
    unsafe fn block(&self, at: &dyn Fn(usize) -> isize, n: usize, bufs: [&mut [f32; BLOCK]; 3], o: &mut [f32; BLOCK]) {
        let stride = |k: usize| self.layout.strides[0][k];
        let mut ins = [bufs[0].as_ptr(), bufs[1].as_ptr(), bufs[2].as_ptr()];
        for (k, buf) in bufs.into_iter().enumerate() {
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
            unsafe { compute(self.op, self.scalars, ins, dst.cast(), n) };
        } else {
            unsafe {
                compute(self.op, self.scalars, ins, o.as_mut_ptr(), n);
                dtype::store(dtype, dst, stride(0), &o[..n]);
            }
        }
    }
}

/// Copies a short row without a call to `memcpy`, whose call cost more than the copy.
///
/// # Safety
/// `src` and `dst` hold `n` floats each and do not overlap.
#[inline(always)]
unsafe fn copy_short(src: *const f32, dst: *mut f32, n: usize) {
    let mut i = 0;
    unsafe {
        while i + 8 <= n {
            dst.add(i).cast::<[f32; 8]>().write_unaligned(src.add(i).cast::<[f32; 8]>().read_unaligned());
            i += 8;
        }
        if i + 4 <= n {
            dst.add(i).cast::<[f32; 4]>().write_unaligned(src.add(i).cast::<[f32; 4]>().read_unaligned());
            i += 4;
        }
        if i + 2 <= n {
            dst.add(i).cast::<[f32; 2]>().write_unaligned(src.add(i).cast::<[f32; 2]>().read_unaligned());
            i += 2;
        }
        if i < n {
            *dst.add(i) = *src.add(i);
        }
    }
}

// ANCHOR: dense
/// `op` over `n` contiguous float32 elements at runtime-view addresses `[out, a, b, c]` (the
/// output stands in for an input the operation does not have): the common case needs no
/// layout to walk and no conversion.
pub(crate) fn run_dense_f32(op: Pointwise, scalars: [f32; 2], [o, a, b, c]: [usize; 4], n: usize) {
    let at = |addr: usize, start: usize| (addr as *mut f32).wrapping_add(start).cast_const();
    parallel(n, |start, count| {
        let ins = [at(a, start), at(b, start), at(c, start)];
        // SAFETY: the launch checked each operand's n elements against its allocation.
        unsafe { compute(op, scalars, ins, at(o, start).cast_mut(), count) }
    });
}
// ANCHOR_END: dense

// ANCHOR: compute
/// The arithmetic on `n` float32 values; `x`, the first scalar, is alpha for add, the
/// threshold for threshold_backward and the value for fill. NaN propagates through maximum
/// and minimum. Raw pointers, because an in-place operation's output is one of its inputs.
///
/// # Safety
/// The inputs the operation reads and `o` must be valid for `n` elements.
pub(crate) unsafe fn compute(op: Pointwise, x: [f32; 2], ins: [*const f32; 3], o: *mut f32, n: usize) {
    // The same loops compiled three times, for the widest vectors this CPU has (the crate is
    // built for baseline x86-64, whose SSE2 is a quarter of AVX-512's width).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return compute_avx512(op, x, ins, o, n);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return compute_avx2(op, x, ins, o, n);
        }
    }
    unsafe { compute_any::<false>(op, x, ins, o, n) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn compute_avx512(op: Pointwise, x: [f32; 2], ins: [*const f32; 3], o: *mut f32, n: usize) {
    unsafe { compute_any::<true>(op, x, ins, o, n) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn compute_avx2(op: Pointwise, x: [f32; 2], ins: [*const f32; 3], o: *mut f32, n: usize) {
    unsafe { compute_any::<true>(op, x, ins, o, n) }
}

#[inline(always)]
unsafe fn compute_any<const FMA: bool>(op: Pointwise, [x, y]: [f32; 2], [a, b, c]: [*const f32; 3], o: *mut f32, n: usize) {
    unsafe {
        match op {
            Pointwise::Fill => map1(n, a, o, |_| x),
            Pointwise::Copy => map1(n, a, o, |a| a),
            Pointwise::Neg => map1(n, a, o, |a| -a),
            Pointwise::Abs => map1(n, a, o, f32::abs),
            Pointwise::Exp => map1(n, a, o, math::exp),
            Pointwise::Relu => map1(n, a, o, |a| if a > 0.0 || a.is_nan() { a } else { 0.0 }),
            Pointwise::Sigmoid => map1(n, a, o, math::sigmoid),
            Pointwise::Tanh => map1(n, a, o, math::tanh),
            Pointwise::Add if x == 1.0 => map2(n, a, b, o, |a, b| a + b),
            Pointwise::Add => map2(n, a, b, o, |a, b| a + x * b),
            Pointwise::Mul => map2(n, a, b, o, |a, b| a * b),
            Pointwise::Div => map2(n, a, b, o, |a, b| a / b),
            Pointwise::Maximum => map2(n, a, b, o, |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }),
            Pointwise::Minimum => map2(n, a, b, o, |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.min(b) }),
            // threshold_backward's iterator lists `self` before `grad`: the gradient where
            // self > threshold.
            Pointwise::ThresholdBackward => map2(n, a, b, o, |s, grad| if s <= x { 0.0 } else { grad }),
            // ANCHOR: activations
            Pointwise::Silu => map1(n, a, o, |a| a / (1.0 + math::exp(-a))),
            Pointwise::Gelu if x == 0.0 => map1(n, a, o, gelu::<FMA>),
            Pointwise::Gelu => map1(n, a, o, gelu_tanh),
            Pointwise::LeakyRelu => map1(n, a, o, |a| if a > 0.0 { a } else { a * x }),
            // The backwards take (grad, self), except leaky_relu's: its iterator lists self first.
            Pointwise::SiluBackward => map2(n, a, b, o, |grad, s| {
                let sigmoid = math::sigmoid(s);
                grad * sigmoid * (1.0 + s * (1.0 - sigmoid))
            }),
            Pointwise::GeluBackward if x == 0.0 => map2(n, a, b, o, gelu_backward::<FMA>),
            Pointwise::GeluBackward => map2(n, a, b, o, gelu_tanh_backward),
            Pointwise::LeakyReluBackward => map2(n, a, b, o, |s, grad| if s > 0.0 { grad } else { grad * x }),
            // hardtanh clamps to [x, y] (NaN stays NaN); its gradient is zero at and beyond the bounds.
            Pointwise::Hardtanh => map1(n, a, o, |a| if a < x { x } else if a > y { y } else { a }),
            Pointwise::HardtanhBackward => map2(n, a, b, o, |grad, s| if s <= x || s >= y { 0.0 } else { grad }),
            // ANCHOR_END: activations
            // ANCHOR: optimizer_math
            // What the optimizers' steps are made of; x is the weight or the value.
            Pointwise::Sqrt => map1(n, a, o, f32::sqrt),
            Pointwise::Reciprocal => map1(n, a, o, |a| 1.0 / a),
            Pointwise::Log => map1(n, a, o, f32::ln),
            // CPU's two-sided form: exact at both ends.
            Pointwise::Lerp => map2(n, a, b, o, |s, e| if x.abs() < 0.5 { s + x * (e - s) } else { e - (e - s) * (1.0 - x) }),
            Pointwise::Addcmul => map3(n, a, b, c, o, |s, t1, t2| s + x * t1 * t2),
            Pointwise::Addcdiv => map3(n, a, b, c, o, |s, t1, t2| s + x * t1 / t2),
            // CPU's addr_kernel: beta * self + alpha * vec1 * vec2, self unread when beta is 0.
            Pointwise::Addr if x == 0.0 => map3(n, a, b, c, o, |_, v1, v2| y * v1 * v2),
            Pointwise::Addr => map3(n, a, b, c, o, |s, v1, v2| x * s + y * v1 * v2),
            Pointwise::DivTrunc => map2(n, a, b, o, |a, b| (a / b).trunc()),
            Pointwise::DivFloor => map2(n, a, b, o, div_floor),
            // ANCHOR_END: optimizer_math
            // ANCHOR: table_formulas
            // The table-driven operators (csrc/operators/PointwiseTable.cpp): one formula each.
            // Comparisons and logical operators give 1.0 or 0.0, stored as the output's dtype.
            Pointwise::Eq => map2(n, a, b, o, |a, b| f32::from(u8::from(a == b))),
            Pointwise::Ne => map2(n, a, b, o, |a, b| f32::from(u8::from(a != b))),
            Pointwise::Lt => map2(n, a, b, o, |a, b| f32::from(u8::from(a < b))),
            Pointwise::Le => map2(n, a, b, o, |a, b| f32::from(u8::from(a <= b))),
            Pointwise::Gt => map2(n, a, b, o, |a, b| f32::from(u8::from(a > b))),
            Pointwise::Ge => map2(n, a, b, o, |a, b| f32::from(u8::from(a >= b))),
            Pointwise::LogicalNot => map1(n, a, o, |a| f32::from(u8::from(a == 0.0))),
            Pointwise::LogicalAnd => map2(n, a, b, o, |a, b| f32::from(u8::from(a != 0.0 && b != 0.0))),
            Pointwise::LogicalOr => map2(n, a, b, o, |a, b| f32::from(u8::from(a != 0.0 || b != 0.0))),
            Pointwise::IsNegInf => map1(n, a, o, |a| f32::from(u8::from(a == f32::NEG_INFINITY))),
            Pointwise::IsPosInf => map1(n, a, o, |a| f32::from(u8::from(a == f32::INFINITY))),
            Pointwise::Where => map3(n, a, b, c, o, |cond, s, other| if cond != 0.0 { s } else { other }),
            Pointwise::MaskedFill => map2(n, a, b, o, |mask, s| if mask != 0.0 { x } else { s }),
            Pointwise::Sign => map1(n, a, o, |a| if a > 0.0 { 1.0 } else if a < 0.0 { -1.0 } else { a * 0.0 }),
            Pointwise::Rsqrt => map1(n, a, o, |a| 1.0 / a.sqrt()),
            Pointwise::Erfinv => map1(n, a, o, math::erfinv),
            Pointwise::Sin => map1(n, a, o, f32::sin),
            Pointwise::Cos => map1(n, a, o, f32::cos),
            // CPU's special cases (pow_Tensor_Scalar_out's fill and copy, then
            // pow_tensor_scalar_optimized_kernel), so results agree bit for bit. x^1 comes up in
            // every backward of x^2 (RMSNorm, the variance of layer norm).
            Pointwise::PowScalar if x == 0.0 => map1(n, a, o, |_| 1.0),
            Pointwise::PowScalar if x == 1.0 => map1(n, a, o, |a| a),
            Pointwise::PowScalar if x == 2.0 => map1(n, a, o, |a| a * a),
            Pointwise::PowScalar if x == 3.0 => map1(n, a, o, |a| a * a * a),
            Pointwise::PowScalar if x == 0.5 => map1(n, a, o, f32::sqrt),
            Pointwise::PowScalar if x == -0.5 => map1(n, a, o, |a| 1.0 / a.sqrt()),
            Pointwise::PowScalar if x == -1.0 => map1(n, a, o, |a| 1.0 / a),
            Pointwise::PowScalar if x == -2.0 => map1(n, a, o, |a| 1.0 / (a * a)),
            Pointwise::PowScalar => map1(n, a, o, |a| a.powf(x)),
            Pointwise::ClampMin => map1(n, a, o, |a| if a < x { x } else { a }),
            Pointwise::ClampMax => map1(n, a, o, |a| if a > x { x } else { a }),
            Pointwise::Hardswish => map1(n, a, o, |a| a * (a + 3.0).clamp(0.0, 6.0) / 6.0),
            Pointwise::Hardsigmoid => map1(n, a, o, |a| (a + 3.0).clamp(0.0, 6.0) / 6.0),
            Pointwise::HardswishBackward => map2(n, a, b, o, |grad, s| {
                if s < -3.0 { 0.0 } else if s <= 3.0 { grad * (s / 3.0 + 0.5) } else { grad }
            }),
            Pointwise::HardsigmoidBackward => map2(n, a, b, o, |grad, s| if s > -3.0 && s < 3.0 { grad / 6.0 } else { 0.0 }),
            // sigmoid's and tanh's gradients from their outputs: (grad, output).
            Pointwise::SigmoidBackward => map2(n, a, b, o, |grad, y| grad * (1.0 - y) * y),
            Pointwise::TanhBackward => map2(n, a, b, o, |grad, y| grad * (1.0 - y * y)),
            // x: beta, y: threshold (linear above it, as CPU).
            Pointwise::Softplus => map1(n, a, o, |a| if a * x > y { a } else { (a * x).exp().ln_1p() / x }),
            Pointwise::SoftplusBackward => map2(n, a, b, o, |grad, s| {
                let z = (s * x).exp();
                if s * x > y { grad } else { grad * z / (z + 1.0) }
            }),
            Pointwise::Log1p => map1(n, a, o, f32::ln_1p),
            Pointwise::Floor => map1(n, a, o, f32::floor),
            Pointwise::Ceil => map1(n, a, o, f32::ceil),
            Pointwise::Trunc => map1(n, a, o, f32::trunc),
            Pointwise::Log2 => map1(n, a, o, f32::log2),
            Pointwise::Threshold => map1(n, a, o, |a| if a <= x { y } else { a }),
            Pointwise::Hardshrink => map1(n, a, o, |a| if a >= -x && a <= x { 0.0 } else { a }),
            Pointwise::Softshrink => map1(n, a, o, |a| if a > x { a - x } else if a < -x { a + x } else { a * 0.0 }),
            Pointwise::ShrinkBackward => map2(n, a, b, o, |grad, s| if s >= -x && s <= x { 0.0 } else { grad }),
            Pointwise::Mish => map1(n, a, o, |a| a * a.exp().ln_1p().tanh()),
            // A NaN input stays NaN; an absent bound is infinite; max wins over min, as on CPU.
            Pointwise::Clamp => map1(n, a, o, |a| {
                let low = if a < x { x } else { a };
                if low > y { y } else { low }
            }),
            // x * log(y), 0 where x is 0 unless y is NaN.
            Pointwise::Xlogy => map2(n, a, b, o, |a, b| if b.is_nan() { f32::NAN } else if a == 0.0 { 0.0 } else { a * b.ln() }),
            Pointwise::Elu => map1(n, a, o, |a| if a > 0.0 { y * a } else { y * x * a.exp_m1() }),
            // (grad, self): the gradient of elu at self.
            Pointwise::EluBackward => map2(n, a, b, o, |grad, s| if s > 0.0 { grad * y } else { grad * y * x * s.exp() }),
            // CELU: the input scaled by `y` inside the exponential only.
            Pointwise::Celu => map1(n, a, o, |a| if a > 0.0 { a } else { x * (a * y).exp_m1() }),
            Pointwise::CeluBackward => map2(n, a, b, o, |grad, s| if s > 0.0 { grad } else { grad * y * x * (s * y).exp() }),
            // CPU's forms: min(x, 0) - log1p(exp(-|x|)), and its gradient from z = exp(-|x|).
            Pointwise::LogSigmoid => map1(n, a, o, |a| a.min(0.0) - (-a.abs()).exp().ln_1p()),
            Pointwise::LogSigmoidBackward => map2(n, a, b, o, |grad, s| {
                let z = (-s.abs()).exp();
                let (max_deriv, sign) = if s < 0.0 { (1.0, 1.0) } else { (0.0, -1.0) };
                grad * (max_deriv - sign * (z / (1.0 + z)))
            }),
            // Bitwise operators on bools (integers: kernels/integer.rs).
            Pointwise::BitwiseNot => map1(n, a, o, |a| f32::from(u8::from(a == 0.0))),
            Pointwise::BitwiseAnd => map2(n, a, b, o, |a, b| f32::from(u8::from(a != 0.0 && b != 0.0))),
            Pointwise::BitwiseOr => map2(n, a, b, o, |a, b| f32::from(u8::from(a != 0.0 || b != 0.0))),
            Pointwise::BitwiseXor => map2(n, a, b, o, |a, b| f32::from(u8::from((a != 0.0) != (b != 0.0)))),
            // ANCHOR_END: table_formulas
            _ => {} // arity() admits only the operations above
        }
    }
}

// ANCHOR_END: compute

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1 / sqrt(2 pi), the standard normal density at 0.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
/// GELU's tanh approximation: tanh(sqrt(2 / pi) (x + 0.044715 x^3)).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const KAPPA: f32 = 0.044_715;

// The larger formulas are functions, not closures: a closure the compiler chooses not to
// inline is compiled on its own, without the AVX features of the kernel it is written in;
// an `#[inline(always)]` function is always compiled into it.
#[inline(always)]
fn gelu<const FMA: bool>(a: f32) -> f32 {
    a * normal_cdf::<FMA>(a).0
}

/// Φ(x), the standard normal distribution (the exact GELU's gate), and e^(-x²/2), which its
/// derivative needs too. erf by Abramowitz and Stegun's 7.1.26, within 1.5e-7, the formula of
/// PyTorch's vectorised CPU erf. `1 + erf` needs absolute accuracy only, so the series near 0
/// that [`math::erf`] adds is left out; below 0 the tail is taken as it is, not as 1 - (1 - tail).
#[inline(always)]
fn normal_cdf<const FMA: bool>(x: f32) -> (f32, f32) {
    let fma = math::mul_add::<FMA>;
    let a = x.abs() * FRAC_1_SQRT_2;
    let t = 1.0 / fma(0.327_591_1, a, 1.0);
    let poly = fma(fma(fma(fma(1.061_405_4, t, -1.453_152_1), t, 1.421_413_7), t, -0.284_496_74), t, 0.254_829_6) * t;
    let e = math::exp_with::<FMA>(-a * a);
    let tail = 0.5 * poly * e; // 1 - Φ(|x|)
    (if x < 0.0 { tail } else { 1.0 - tail }, e)
}

#[inline(always)]
fn gelu_tanh(a: f32) -> f32 {
    0.5 * a * (1.0 + math::tanh(SQRT_2_OVER_PI * (a + KAPPA * a * a * a)))
}

#[inline(always)]
fn gelu_backward<const FMA: bool>(grad: f32, s: f32) -> f32 {
    let (cdf, e) = normal_cdf::<FMA>(s);
    grad * math::mul_add::<FMA>(s, e * FRAC_1_SQRT_2PI, cdf)
}

#[inline(always)]
fn gelu_tanh_backward(grad: f32, s: f32) -> f32 {
    let inner = SQRT_2_OVER_PI * (s + KAPPA * s * s * s);
    let t = math::tanh(inner);
    let d_inner = SQRT_2_OVER_PI * (1.0 + 3.0 * KAPPA * s * s);
    grad * (0.5 * (1.0 + t) + 0.5 * s * (1.0 - t * t) * d_inner)
}

/// `o[i] = f(a[i])`: generic, so `f` is inlined and the loop vectorised. In place (`o == a`)
/// is a case of its own: the compiler cannot vectorise a loop whose output may overlap its
/// input, and TensorIterator has already ruled out every overlap but an exact one.
#[inline(always)]
unsafe fn map1(n: usize, a: *const f32, o: *mut f32, f: impl Fn(f32) -> f32) {
    unsafe {
        let out = std::slice::from_raw_parts_mut(o, n);
        if a == o.cast_const() {
            for i in 0..n {
                out[i] = f(out[i]);
            }
        } else {
            let a = std::slice::from_raw_parts(a, n);
            for i in 0..n {
                out[i] = f(a[i]);
            }
        }
    }
}

/// `o[i] = f(a[i], b[i], c[i])`, with `o` possibly equal to an input (through raw reads).
#[inline(always)]
unsafe fn map3(n: usize, a: *const f32, b: *const f32, c: *const f32, o: *mut f32, f: impl Fn(f32, f32, f32) -> f32) {
    unsafe {
        if a == o.cast_const() && b != a && c != a {
            // the optimizers' in-place case, vectorised: the output is the first input
            let out = std::slice::from_raw_parts_mut(o, n);
            let (b, c) = (std::slice::from_raw_parts(b, n), std::slice::from_raw_parts(c, n));
            for i in 0..n {
                out[i] = f(out[i], b[i], c[i]);
            }
        } else {
            for i in 0..n {
                *o.add(i) = f(*a.add(i), *b.add(i), *c.add(i));
            }
        }
    }
}

/// `o[i] = f(a[i], b[i])`, with `o` possibly equal to `a` or `b`.
#[inline(always)]
unsafe fn map2(n: usize, a: *const f32, b: *const f32, o: *mut f32, f: impl Fn(f32, f32) -> f32) {
    unsafe {
        let out = std::slice::from_raw_parts_mut(o, n);
        let (a_is_o, b_is_o) = (a == o.cast_const(), b == o.cast_const());
        match (a_is_o, b_is_o) {
            (true, true) => {
                for i in 0..n {
                    out[i] = f(out[i], out[i]);
                }
            }
            (true, false) => {
                let b = std::slice::from_raw_parts(b, n);
                for i in 0..n {
                    out[i] = f(out[i], b[i]);
                }
            }
            (false, true) => {
                let a = std::slice::from_raw_parts(a, n);
                for i in 0..n {
                    out[i] = f(a[i], out[i]);
                }
            }
            (false, false) => {
                let (a, b) = (std::slice::from_raw_parts(a, n), std::slice::from_raw_parts(b, n));
                for i in 0..n {
                    out[i] = f(a[i], b[i]);
                }
            }
        }
    }
}

/// `a / b` rounded down, as c10::div_floor_floating computes it: from the remainder, so a
/// quotient that `a / b` rounds up to an integer is still floored.
fn div_floor(a: f32, b: f32) -> f32 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && (b < 0.0) != (m < 0.0) {
        div -= 1.0;
    }
    if div == 0.0 {
        return 0.0f32.copysign(a / b);
    }
    let floor = div.floor();
    if div - floor > 0.5 { floor + 1.0 } else { floor }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_reads_the_part_element_of_each_output_element() {
        // Rows shorter and longer than a block, a part at least a block long, both argument
        // orders, and sizes split between threads.
        for (n, inner, period) in [(24 * 64, 1, 64), (24 * 64, 64, 24), (3 * 4097, 1, 4097), (3 * 4097, 4097, 3),
            (4 * 8 * 25, 25, 8), (600 * 100, 1, 100), (70_000, 70_000, 1), (40 * 1000, 1000, 20)]
        {
            for part_first in [false, true] {
                let full: Vec<f32> = (0..n).map(|i| i as f32).collect();
                let part: Vec<f32> = (0..period).map(|i| 1.0 + i as f32 * 0.5).collect();
                let mut out = vec![0f32; n];
                let shape = Broadcast { n, inner, period, part_first };
                let addr = |v: &[f32]| v.as_ptr() as usize;
                shape.run(Pointwise::Div, [0.0, 0.0], out.as_mut_ptr() as usize, addr(&full), addr(&part));
                for i in 0..n {
                    let (f, p) = (full[i], part[(i / inner) % period]);
                    let want = if part_first { p / f } else { f / p };
                    assert_eq!(out[i], want, "{n} {inner} {period} {part_first} at {i}");
                }
            }
        }
    }

    #[test]
    fn normal_cdf_within_its_bound() {
        unsafe extern "C" {
            fn erf(x: f64) -> f64; // C's libm, linked by the standard library
        }
        let mut x = -12.0f32;
        while x < 12.0 {
            let want = 0.5 * (1.0 + unsafe { erf(f64::from(x) * std::f64::consts::FRAC_1_SQRT_2) });
            let (got, e) = normal_cdf::<false>(x);
            assert!((f64::from(got) - want).abs() <= 3e-7, "Φ({x}) = {got}, expected {want}");
            assert!((f64::from(e) - (-0.5 * f64::from(x) * f64::from(x)).exp()).abs() <= 1e-7);
            x += 0.00573;
        }
        assert_eq!((normal_cdf::<false>(f32::INFINITY).0, normal_cdf::<false>(f32::NEG_INFINITY).0), (1.0, 0.0));
        assert!(normal_cdf::<false>(f32::NAN).0.is_nan());
    }
}
