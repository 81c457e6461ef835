//! Softmax and log-softmax, forward and backward, over contiguous operands seen as
//! `[outer, size, inner]`: the softmax runs along the middle dimension. Arithmetic in float32
//! (as PyTorch's CPU kernels do for all three dtypes), one pass for the maximum, one for the
//! sum of exponentials, one to write.
//!
//! Speed comes from the inner loops being SIMD code: `exp` is the branch-free one of
//! `math.rs` (libm's is a call per element), sums and maxima keep 8 partial results (a single
//! running sum is a chain the compiler may not reorder), and on CPUs with AVX2 the same code is
//! compiled a second time for 8-wide registers and chosen at run time.

use std::ops::Range;
use std::sync::OnceLock;

use openreg_runtime as rt;

use super::dtype::{self, Dtype};
use super::elementwise::parallel_min;
use super::math;
use super::{launch, dense};
use crate::error::Result;
use crate::ffi::ffi::{Dense, Softmax};

// ANCHOR: launch_softmax
/// Launches a softmax-family kernel along the middle dimension of `[outer, size, inner]`
/// contiguous operands (`inputs`: the input, or grad_output and output). Softmax also writes
/// each row's log-sum-exp to `lse` if it is given (attention keeps it for its backward). False,
/// having done nothing, if one of the dtypes is not float32, float16 or bfloat16.
pub(crate) fn launch_softmax(
    op: Softmax, out: Dense, inputs: &[Dense], lse: Dense, outer: i64, size: i64, inner: i64, device: i64,
) -> Result<bool> {
    let [outer, size, inner] = [outer, size, inner].map(|v| v.max(0) as usize);
    let n = outer * size * inner;
    let mut slots = Vec::with_capacity(1 + inputs.len());
    for t in std::iter::once(&out).chain(inputs) {
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != n {
            return Err(rt::Error::InvalidValue(format!("softmax operands of {n} elements expected")).into());
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    let lse = match lse.data {
        0 => 0,
        _ if op == Softmax::Softmax && Dtype::from_code(lse.dtype) == Some(Dtype::Float) && lse.numel == outer * inner => {
            dense(&lse, Dtype::Float)?
        }
        _ => return Err(rt::Error::InvalidValue(format!("softmax's lse must be {} float32 elements", outer * inner)).into()),
    };
    if n == 0 {
        return Ok(true);
    }
    let work = SoftmaxKernel { op, out: slots[0], inputs: slots.split_off(1), lse, outer, size, inner };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_softmax

/// Lanes (positions along `inner`) or row elements handled at a time.
const BLOCK: usize = 256;
/// Elements per parallel part, at least.
const PARALLEL: usize = 1 << 15;
/// Rows up to this long are done [`ROWS`] at a time, one row per SIMD lane. Longer ones go
/// one at a time: measured, rows of 48 were quicker that way, rows of 40 transposed.
const SHORT: usize = 40;
const ROWS: usize = 16;

/// An operand: runtime-view address and dtype.
pub(crate) type Operand = (usize, Dtype);

#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct SoftmaxKernel {
    pub op: Softmax,
    /// The result (output, or grad_input).
    pub out: Operand,
    /// Forward: `[input]`; backward: `[grad_output, output]`.
    pub inputs: Vec<Operand>,
    /// Softmax only: where to write each row's `max + ln(sum)` (`[outer, inner]` float32), or 0.
    pub lse: usize,
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
}

impl SoftmaxKernel {
    /// Runs on as many threads as the work is worth; a unit is one `(outer, lane block)` pair.
    /// Short rows (`inner == 1`, `size <= SHORT`): a unit is `ROWS` rows.
    pub(crate) fn run(&self) {
        let short = self.short();
        // Lanes per unit: a block, or fewer when the blocks are too few to give every thread
        // one (softmax over dim 0 of 4096x64 is a single block: it ran on one thread).
        let threads = super::thread_pool::threads();
        let width = if self.outer * self.inner.div_ceil(BLOCK) >= threads {
            BLOCK
        } else {
            self.inner.div_ceil(threads).next_multiple_of(LANES).min(BLOCK)
        };
        let (blocks, group) = if short { (1, ROWS) } else { (self.inner.div_ceil(width), 1) };
        let units = self.outer.div_ceil(group) * blocks;
        let per_unit = self.size * self.inner.min(width) * group;
        parallel_min(units, (PARALLEL / per_unit.max(1)).max(1), |start, count| {
            // Zeroed once per part, not per row: for rows of 16, zeroing per row cost more
            // than the softmax.
            let mut scratch = Scratch {
                x: [[0.0; ROWS]; SHORT],
                y: [[0.0; ROWS]; SHORT],
                flat: [0.0; ROWS * SHORT],
                acc: [0.0; BLOCK],
                max: [0.0; BLOCK],
            };
            // SAFETY: C++ checked each operand's `outer * size * inner` elements against its
            // live allocation; units write disjoint elements.
            unsafe { self.units_dispatch(start..start + count, blocks, width, &mut scratch) };
        });
    }

    /// Whether rows go [`ROWS`] at a time (transposed). The backward has no exponentials to
    /// spread over the lanes, so the transposes cost it more than they save from rows of 16 on
    /// (4096 rows of 32: 86 µs transposed, 40 µs one at a time).
    fn short(&self) -> bool {
        let backward = matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward);
        self.inner == 1 && if backward { self.size < LANES } else { self.size <= SHORT }
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

    // ANCHOR: dispatch
    /// Runs [`Self::units`] compiled for the widest registers the CPU has (checked once).
    unsafe fn units_dispatch(&self, units: Range<usize>, blocks: usize, width: usize, scratch: &mut Scratch) {
        #[cfg(target_arch = "x86_64")]
        match simd() {
            Simd::Avx512 => return unsafe { self.units_avx512(units, blocks, width, scratch) },
            Simd::Avx2 => return unsafe { self.units_avx2(units, blocks, width, scratch) },
            Simd::Baseline => {}
        }
        unsafe { self.units::<false>(units, blocks, width, scratch) }
    }

    /// The same code as [`Self::units`] (inlined here), compiled with 16-wide registers and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn units_avx512(&self, units: Range<usize>, blocks: usize, width: usize, scratch: &mut Scratch) {
        unsafe { self.units::<true>(units, blocks, width, scratch) }
    }

    /// The same code as [`Self::units`] (inlined here), compiled with 8-wide registers and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn units_avx2(&self, units: Range<usize>, blocks: usize, width: usize, scratch: &mut Scratch) {
        unsafe { self.units::<true>(units, blocks, width, scratch) }
    }
    // ANCHOR_END: dispatch

    /// Units `units`, each `ROWS` short rows, one long row, or a block of `width` lanes of
    /// `blocks` (the run in one call, so that the choice of code is made once per part).
    #[inline(always)]
    unsafe fn units<const FMA: bool>(&self, units: Range<usize>, blocks: usize, width: usize, scratch: &mut Scratch) {
        for u in units {
            unsafe {
                if self.short() {
                    self.short_rows::<FMA>(u * ROWS, ROWS.min(self.outer - u * ROWS), scratch);
                } else if self.inner == 1 {
                    self.row::<FMA>(u, scratch);
                } else {
                    let (o, b) = (u / blocks, u % blocks);
                    let lanes = b * width..(b * width + width).min(self.inner);
                    self.lanes::<FMA>(o, lanes.start, lanes.len(), scratch);
                }
            }
        }
    }

    /// Lanes `lane..lane + n` of outer index `o`: every step along `size` reads `n` neighbours.
    #[inline(always)]
    unsafe fn lanes<const FMA: bool>(&self, o: usize, lane: usize, n: usize, scratch: &mut Scratch) {
        let Scratch { acc, x, y, max, .. } = scratch;
        let (acc, x, y) = (&mut acc[..n], &mut x.as_flattened_mut()[..n], &mut y.as_flattened_mut()[..n]);
        unsafe {
            if matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward) {
                let (grad, output, softmax) = (self.inputs[0], self.inputs[1], self.op == Softmax::SoftmaxBackward);
                // acc = sum over d of grad * output (softmax) or grad (log-softmax).
                acc.fill(0.0);
                for d in 0..self.size {
                    let g = self.view(grad, o, d, lane, x);
                    if softmax {
                        for ((a, &g), &out) in acc.iter_mut().zip(g).zip(self.view(output, o, d, lane, y)) {
                            *a = math::mul_add::<FMA>(g, out, *a);
                        }
                    } else {
                        for (a, &g) in acc.iter_mut().zip(g) {
                            *a += g;
                        }
                    }
                }
                for d in 0..self.size {
                    let (g, out) = (self.view(grad, o, d, lane, x), self.view(output, o, d, lane, y));
                    let dst = self.destination(o, d, lane, &mut max[..n]);
                    backward_values::<FMA>(softmax, g, out, acc, dst);
                    self.finish(o, d, lane, dst);
                }
                return;
            }
            let input = self.inputs[0];
            let max = &mut max[..n];
            max.fill(f32::NEG_INFINITY);
            for d in 0..self.size {
                for (m, &v) in max.iter_mut().zip(self.view(input, o, d, lane, x)) {
                    *m = larger(*m, v);
                }
            }
            acc.fill(0.0);
            for d in 0..self.size {
                let values = self.view(input, o, d, lane, x);
                for i in 0..n {
                    acc[i] += math::exp_with::<FMA>(values[i] - max[i]);
                }
            }
            self.write_lse::<FMA>(o * self.inner + lane, max, acc);
            // Per lane, once: log-softmax subtracts `max + ln(sum)`, softmax multiplies by 1/sum.
            for i in 0..n {
                acc[i] = if self.op == Softmax::LogSoftmax { max[i] + math::ln_with::<FMA>(acc[i]) } else { 1.0 / acc[i] };
            }
            for d in 0..self.size {
                let values = self.view(input, o, d, lane, y);
                let dst = self.destination(o, d, lane, x);
                if self.op == Softmax::LogSoftmax {
                    for i in 0..n {
                        dst[i] = values[i] - acc[i];
                    }
                } else {
                    for i in 0..n {
                        dst[i] = math::exp_with::<FMA>(values[i] - max[i]) * acc[i];
                    }
                }
                self.finish(o, d, lane, dst);
            }
        }
    }

    // ANCHOR: short_rows
    /// Rows `first..first + rows` (at most `ROWS`), each at most `SHORT` long, transposed so
    /// that element `d` of row `r` sits at `d * ROWS + r`: every loop then runs along the
    /// rows, one per SIMD lane, instead of along a row too short to fill a register.
    #[inline(always)]
    unsafe fn short_rows<const FMA: bool>(&self, first: usize, rows: usize, scratch: &mut Scratch) {
        let size = self.size;
        let Scratch { x, y, flat, .. } = scratch;
        let (x, y, flat) = (&mut x[..size], &mut y[..size], &mut flat[..rows * size]);
        // Each loop below runs over the ROWS lanes of an element: a fixed-size array, so
        // it has no bounds checks and is one AVX-512 instruction (two AVX2 ones) per step.
        let mut acc = [0f32; ROWS];
        unsafe {
            if matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward) {
                self.transpose_in(self.inputs[0], first, rows, x, flat); // grad_output
                self.transpose_in(self.inputs[1], first, rows, y, flat); // output
                for (g, out) in x.iter().zip(y.iter()) {
                    for r in 0..ROWS {
                        acc[r] += if self.op == Softmax::SoftmaxBackward { g[r] * out[r] } else { g[r] };
                    }
                }
                for (g, out) in x.iter_mut().zip(y.iter()) {
                    for r in 0..ROWS {
                        g[r] = backward_value::<FMA>(self.op, g[r], out[r], acc[r]);
                    }
                }
            } else {
                self.transpose_in(self.inputs[0], first, rows, x, flat);
                let mut max = [f32::NEG_INFINITY; ROWS];
                for v in x.iter() {
                    for r in 0..ROWS {
                        max[r] = larger(max[r], v[r]);
                    }
                }
                // The exponentials in one loop, their sum in another (see `exp_into`).
                for (v, e) in x.iter().zip(y.iter_mut()) {
                    for r in 0..ROWS {
                        e[r] = math::exp_with::<FMA>(v[r] - max[r]);
                    }
                }
                for e in y.iter() {
                    for r in 0..ROWS {
                        acc[r] += e[r];
                    }
                }
                self.write_lse::<FMA>(first, &max[..rows], &acc[..rows]);
                for r in 0..ROWS {
                    acc[r] = if self.op == Softmax::LogSoftmax { max[r] + math::ln_with::<FMA>(acc[r]) } else { 1.0 / acc[r] };
                }
                for (v, e) in x.iter_mut().zip(y.iter()) {
                    for r in 0..ROWS {
                        v[r] = if self.op == Softmax::LogSoftmax { v[r] - acc[r] } else { e[r] * acc[r] };
                    }
                }
            }
            // Back to rows: read down a column of `x`, write along a row of the result, 16
            // elements at a time (a gather and a store; one at a time was a quarter of the time).
            let dst = self.destination(first, 0, 0, flat);
            let (blocks, rest) = x.as_chunks::<ROWS>();
            for r in 0..rows {
                let (chunks, tail) = dst[r * size..(r + 1) * size].as_chunks_mut::<ROWS>();
                for (c, block) in chunks.iter_mut().zip(blocks) {
                    for j in 0..ROWS {
                        c[j] = block[j][r];
                    }
                }
                for (v, t) in tail.iter_mut().zip(rest) {
                    *v = t[r];
                }
            }
            self.finish(first, 0, 0, dst);
        }
    }

    /// `t[d][r]` = element `d` of row `first + r`, for the `rows` consecutive rows from `first`
    /// (one contiguous block: read in place when float32, else converted into `flat`). Lanes
    /// past `rows` repeat the last row. A gather per element (one instruction for 16 rows),
    /// where writing each row down a column of `t` was a scatter, twice as slow.
    #[inline(always)]
    unsafe fn transpose_in(&self, operand: Operand, first: usize, rows: usize, t: &mut [[f32; ROWS]], flat: &mut [f32]) {
        let size = self.size;
        // SAFETY: the caller's: rows `first..first + rows` exist.
        let src = unsafe { self.view(operand, first, 0, 0, flat) };
        for (d, t) in t.iter_mut().enumerate() {
            for r in 0..ROWS {
                t[r] = src[r.min(rows - 1) * size + d];
            }
        }
    }
    // ANCHOR_END: short_rows

    /// One contiguous row (`inner == 1`), in blocks along it.
    #[inline(always)]
    unsafe fn row<const FMA: bool>(&self, o: usize, scratch: &mut Scratch) {
        let (x, y, short) = (scratch.x.as_flattened_mut(), scratch.y.as_flattened_mut(), &mut scratch.acc);
        let blocks = (0..self.size).step_by(BLOCK).map(|d| (d, (self.size - d).min(BLOCK)));
        unsafe {
            if matches!(self.op, Softmax::SoftmaxBackward | Softmax::LogSoftmaxBackward) {
                let (grad, output, softmax) = (self.inputs[0], self.inputs[1], self.op == Softmax::SoftmaxBackward);
                let mut sum = 0f32;
                for (d, n) in blocks.clone() {
                    let g = self.view(grad, o, d, 0, &mut x[..n]);
                    sum += if softmax {
                        sum_pairs(g, self.view(output, o, d, 0, &mut y[..n]), |g, y| g * y)
                    } else {
                        sum_pairs(g, g, |g, _| g)
                    };
                }
                for (d, n) in blocks {
                    let (g, out) = (self.view(grad, o, d, 0, &mut x[..n]), self.view(output, o, d, 0, &mut y[..n]));
                    let dst = self.destination(o, d, 0, &mut short[..n]);
                    if softmax {
                        map2_into(g, out, dst, |g, y| backward_value::<FMA>(Softmax::SoftmaxBackward, g, y, sum));
                    } else {
                        map2_into(g, out, dst, |g, y| backward_value::<FMA>(Softmax::LogSoftmaxBackward, g, y, sum));
                    }
                    self.finish(o, d, 0, dst);
                }
                return;
            }
            let input = self.inputs[0];
            let mut max = f32::NEG_INFINITY;
            for (d, n) in blocks.clone() {
                max = larger(max, max_of(self.view(input, o, d, 0, &mut x[..n])));
            }
            if self.op == Softmax::LogSoftmax {
                // x - max - ln(sum): the exponentials are only summed.
                let mut sum = 0f32;
                for (d, n) in blocks.clone() {
                    let values = self.view(input, o, d, 0, &mut y[..n]);
                    sum += sum_pairs(values, values, |v, _| math::exp_with::<FMA>(v - max));
                }
                let shift = max + sum.ln(); // once per row: libm's (table-based) is quicker than a polynomial
                for (d, n) in blocks {
                    let values = self.view(input, o, d, 0, &mut y[..n]);
                    let dst = self.destination(o, d, 0, &mut x[..n]);
                    map_into(values, dst, |x| x - shift);
                    self.finish(o, d, 0, dst);
                }
                return;
            }
            // softmax: exp(x - max) / sum, each exponential computed once and kept for the
            // write pass in this thread's scratch row. (Taken out of the thread-local rather
            // than used in a `with` closure: a closure is compiled on its own, without the
            // AVX features of the function it is written in.)
            let long_row = self.size > BLOCK;
            let mut long = if long_row { ROW.take() } else { Vec::new() };
            if long.len() < self.size && long_row {
                long.resize(self.size, 0.0);
            }
            // A short row needs no thread-local access per row.
            let e: &mut [f32] = if long_row { &mut long[..self.size] } else { &mut short[..self.size] };
            let mut sum = 0f32;
            for (d, n) in blocks.clone() {
                sum += exp_into::<FMA>(self.view(input, o, d, 0, &mut x[..n]), max, &mut e[d..d + n]);
            }
            self.write_lse::<FMA>(o, &[max], &[sum]);
            let scale = 1.0 / sum;
            for (d, n) in blocks {
                let dst = self.destination(o, d, 0, &mut x[..n]);
                map_into(&e[d..d + n], dst, |e| e * scale);
                self.finish(o, d, 0, dst);
            }
            if long_row {
                ROW.set(long);
            }
        }
    }

    /// `lse[first..]` = `max + ln(sum)` per row or lane, if asked for.
    #[inline(always)]
    fn write_lse<const FMA: bool>(&self, first: usize, max: &[f32], sum: &[f32]) {
        if self.lse != 0 {
            // SAFETY: the launch checked `outer * inner` float32 elements at `lse`.
            let lse = unsafe { std::slice::from_raw_parts_mut((self.lse as *mut f32).add(first), max.len()) };
            for ((l, &m), &s) in lse.iter_mut().zip(max).zip(sum) {
                *l = m + math::ln_with::<FMA>(s);
            }
        }
    }

    /// Where a block of results at `(o, d)` goes: the output itself when it is float32 (no
    /// copy), else `buf`, which [`Self::finish`] then converts into it.
    #[inline(always)]
    unsafe fn destination<'a>(&self, o: usize, d: usize, lane: usize, buf: &'a mut [f32]) -> &'a mut [f32] {
        if self.out.1 == Dtype::Float {
            return unsafe { std::slice::from_raw_parts_mut(self.at(self.out, o, d, lane) as *mut f32, buf.len()) };
        }
        buf
    }

    #[inline(always)]
    unsafe fn finish(&self, o: usize, d: usize, lane: usize, values: &[f32]) {
        if self.out.1 != Dtype::Float {
            unsafe { self.store(o, d, lane, values) };
        }
    }

    /// `n` elements of a row at `(o, d)` as float32: the memory itself when it holds float32
    /// (no copy), else converted into `buf`.
    #[inline(always)]
    unsafe fn view<'a>(&self, x: Operand, o: usize, d: usize, lane: usize, buf: &'a mut [f32]) -> &'a [f32] {
        unsafe {
            if x.1 == Dtype::Float {
                return std::slice::from_raw_parts(self.at(x, o, d, lane) as *const f32, buf.len());
            }
            self.load(x, o, d, lane, buf);
        }
        buf
    }
}

/// A part's working rows.
struct Scratch {
    x: [[f32; ROWS]; SHORT],
    y: [[f32; ROWS]; SHORT],
    /// Short rows in a dtype other than float32, converted.
    flat: [f32; ROWS * SHORT],
    acc: [f32; BLOCK],
    max: [f32; BLOCK],
}

thread_local! {
    /// A softmax row's exponentials, between the pass that sums them and the one that writes.
    static ROW: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[derive(Clone, Copy)]
pub(super) enum Simd {
    Baseline,
    Avx2,
    Avx512,
}

/// The widest SIMD the CPU has, asked once.
#[cfg(target_arch = "x86_64")]
pub(super) fn simd() -> Simd {
    static SIMD: OnceLock<Simd> = OnceLock::new();
    *SIMD.get_or_init(|| {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            Simd::Baseline
        } else if is_x86_feature_detected!("avx512f") {
            Simd::Avx512
        } else {
            Simd::Avx2
        }
    })
}

// ANCHOR: lanes
/// Lanes of partial results: one running value would be a dependency chain the compiler must
/// keep in order (float addition is not associative); sixteen independent ones vectorise (one
/// AVX-512 register, two AVX2 ones).
const LANES: usize = 16;

/// `e = exp(values - max)`, and their sum: softmax keeps `e` for its write pass, and sums it in
/// a second, small loop that reads it back from L1. (The first version summed inside the
/// exponentials' loop, element by element, and the compiler kept the partial sums in memory: a
/// store and a reload per 16 elements, a quarter of softmax's time.) The exponentials go 16 at
/// a time, the last few as part of the last 16 (see [`last_lanes`]).
#[inline(always)]
fn exp_into<const FMA: bool>(values: &[f32], max: f32, e: &mut [f32]) -> f32 {
    map_into(values, e, |v| math::exp_with::<FMA>(v - max));
    sum_pairs(e, e, |e, _| e)
}

/// Whether a slice of `n` elements ends in a partial chunk that is best done as its last
/// `LANES` elements, overlapping the chunk before: one SIMD step instead of up to 15 scalar
/// ones (rows of 100: a third of softmax's time went to its last four elements).
#[inline(always)]
fn last_lanes(n: usize) -> bool {
    n % LANES != 0 && n > LANES
}

/// `dst[i] = f(src[i])`, `LANES` at a time. The last `LANES` are computed before anything is
/// written, so `dst` may be `src` (an in-place `out=`) even where the two overlap.
#[inline(always)]
fn map_into(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    map2_into(src, src, dst, |x, _| f(x));
}

/// `dst[i] = f(a[i], b[i])`, as [`map_into`].
#[inline(always)]
fn map2_into(a: &[f32], b: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let n = dst.len();
    let (a, b) = (&a[..n], &b[..n]);
    let mut last = [0f32; LANES];
    if last_lanes(n) {
        let (a, b) = (&a[n - LANES..], &b[n - LANES..]);
        for i in 0..LANES {
            last[i] = f(a[i], b[i]);
        }
    }
    let ((ac, ar), (bc, br), (dc, dr)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>(), dst.as_chunks_mut::<LANES>());
    for ((d, a), b) in dc.iter_mut().zip(ac).zip(bc) {
        // Read whole, computed, written whole: element by element, the compiler could not
        // tell `d` from `a` when both came from raw pointers, and did one lane at a time.
        let (a, b, mut out) = (*a, *b, [0f32; LANES]);
        for i in 0..LANES {
            out[i] = f(a[i], b[i]);
        }
        *d = out;
    }
    if last_lanes(n) {
        dst[n - LANES..].copy_from_slice(&last);
    } else {
        for ((d, &a), &b) in dr.iter_mut().zip(ar).zip(br) {
            *d = f(a, b);
        }
    }
}

/// `sum(f(a[i], b[i]))`, in `LANES` partial sums. A partial last chunk is added as the last
/// `LANES` pairs with the lanes counted already masked off.
#[inline(always)]
fn sum_pairs(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let n = a.len().min(b.len());
    let ((ca, ra), (cb, rb)) = (a[..n].as_chunks::<LANES>(), b[..n].as_chunks::<LANES>());
    for (x, y) in ca.iter().zip(cb) {
        let (x, y) = (*x, *y);
        for i in 0..LANES {
            acc[i] += f(x[i], y[i]);
        }
    }
    let mut tail = 0.0;
    if last_lanes(n) {
        // Keep lane i when i >= LANES - ra.len(): a window on `LANES` zero masks, then ones.
        let keep = &KEEP[ra.len()..ra.len() + LANES];
        let (x, y) = (&a[n - LANES..n], &b[n - LANES..n]);
        for i in 0..LANES {
            acc[i] += f32::from_bits(f(x[i], y[i]).to_bits() & keep[i]);
        }
    } else {
        tail = ra.iter().zip(rb).map(|(&x, &y)| f(x, y)).sum();
    }
    // Stored once as a whole: without this, inside the big kernels the compiler packed the
    // 16 running sums as eight 2-wide vectors (to suit the pairwise additions after the loop).
    let acc = std::hint::black_box(acc);
    tree(acc, |a, b| a + b) + tail
}

/// Bit masks: `LANES` that drop a lane, then `LANES` that keep it.
static KEEP: [u32; 2 * LANES] = {
    let mut keep = [0u32; 2 * LANES];
    let mut i = LANES;
    while i < 2 * LANES {
        keep[i] = u32::MAX;
        i += 1;
    }
    keep
};

/// The maximum of `values`, in `LANES` partial maxima. A NaN is skipped here: it reaches the
/// sum of exponentials instead, which makes its whole slice NaN, as on the CPU. (A maximum that
/// carried NaNs was a compare and a blend per step, not one instruction.)
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let (chunks, rest) = values.as_chunks::<LANES>();
    for c in chunks {
        let c = *c;
        for i in 0..LANES {
            acc[i] = larger(acc[i], c[i]);
        }
    }
    if last_lanes(values.len()) {
        // The last LANES again, overlapping: counting an element twice changes no maximum.
        let last = &values[values.len() - LANES..];
        for i in 0..LANES {
            acc[i] = larger(acc[i], last[i]);
        }
        return tree(std::hint::black_box(acc), larger);
    }
    // As in `sum_pairs`: kept as one register, not eight 2-wide ones.
    let acc = std::hint::black_box(acc);
    rest.iter().fold(tree(acc, larger), |m, &v| larger(m, v))
}

/// Combines the lanes pairwise, halving their number each time (a few shuffles); adding them
/// in a row would be a chain of 16 dependent additions, which dominated rows of 16. Every
/// index is a constant: with a loop over the width, `acc` stayed in memory.
#[inline(always)]
fn tree(mut acc: [f32; LANES], f: impl Fn(f32, f32) -> f32) -> f32 {
    for i in 0..8 {
        acc[i] = f(acc[i], acc[i + 8]);
    }
    for i in 0..4 {
        acc[i] = f(acc[i], acc[i + 4]);
    }
    f(f(acc[0], acc[2]), f(acc[1], acc[3]))
}
// ANCHOR_END: lanes

/// The larger of two values, `b` only if it is larger: one SIMD `max` (a NaN `b` is skipped).
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// [`backward_value`] over a block, the choice of formula made once outside the loop.
#[inline(always)]
fn backward_values<const FMA: bool>(softmax: bool, g: &[f32], out: &[f32], sum: &[f32], dst: &mut [f32]) {
    let n = dst.len();
    let (g, out, sum) = (&g[..n], &out[..n], &sum[..n]);
    if softmax {
        for i in 0..n {
            dst[i] = backward_value::<FMA>(Softmax::SoftmaxBackward, g[i], out[i], sum[i]);
        }
    } else {
        for i in 0..n {
            dst[i] = backward_value::<FMA>(Softmax::LogSoftmaxBackward, g[i], out[i], sum[i]);
        }
    }
}

/// From grad `g`, output `y` and the row's `sum`: softmax `y * (g - sum(g * y))`, log-softmax
/// `g - exp(y) * sum(g)`.
#[inline(always)]
fn backward_value<const FMA: bool>(op: Softmax, g: f32, y: f32, sum: f32) -> f32 {
    if op == Softmax::LogSoftmaxBackward { g - math::exp_with::<FMA>(y) * sum } else { y * (g - sum) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: Softmax, outer: usize, size: usize, inner: usize, inputs: &[&[f32]]) -> Vec<f32> {
        let mut out = vec![0f32; outer * size * inner];
        let kernel = SoftmaxKernel {
            lse: 0,
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
        // inner == 1 (rows longer and shorter than a block), and inner > BLOCK (two lane blocks).
        // Rows: short (transposed), just past SHORT, with and without a partial last 16, with a
        // last block of fewer than 16 (260 = 256 + 4).
        let rows = [(4, 33, 1), (3, 41, 1), (5, 48, 1), (3, 100, 1), (2, 260, 1), (3, 700, 1), (2, 17, 1)];
        for (outer, size, inner) in rows.into_iter().chain([(2, 5, 300), (1, 1, 1)]) {
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
    fn in_place_rows_match_out_of_place() {
        for size in [41, 100, 260] {
            let x: Vec<f32> = (0..3 * size).map(|i| ((i * 53 % 97) as f32) / 7.0 - 6.0).collect();
            for op in [Softmax::Softmax, Softmax::LogSoftmax] {
                let want = run(op, 3, size, 1, &[&x]);
                let mut data = x.clone();
                let kernel = SoftmaxKernel {
                    lse: 0,
                    op,
                    out: (data.as_mut_ptr() as usize, Dtype::Float),
                    inputs: vec![(data.as_ptr() as usize, Dtype::Float)],
                    outer: 3,
                    size,
                    inner: 1,
                };
                kernel.run();
                assert_eq!(data, want, "{op:?} rows of {size}");
            }
        }
    }

    #[test]
    fn a_nan_anywhere_in_a_long_row_makes_the_row_nan() {
        // First element, middle, and the overlapped last 16 (elements 84..100 are read twice).
        for at in [0, 50, 90, 99] {
            let mut x: Vec<f32> = (0..200).map(|i| (i % 13) as f32 / 3.0).collect();
            x[at] = f32::NAN;
            for op in [Softmax::Softmax, Softmax::LogSoftmax] {
                let out = run(op, 2, 100, 1, &[&x]);
                assert!(out[..100].iter().all(|v| v.is_nan()), "{op:?} NaN at {at}");
                assert!(out[100..].iter().all(|v| v.is_finite()), "{op:?} NaN at {at}: second row");
            }
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
