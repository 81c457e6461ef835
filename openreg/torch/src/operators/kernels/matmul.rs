//! Matrix products through the `gemm` crates (packed, vectorised): float32 and float16
//! directly; bfloat16, which `gemm` lacks, through float32 copies, and so is a float16
//! product added to an output (addmm): gemm's float16 kernel rounds the product to float16
//! before it adds, where CPU rounds once.

use std::ops::Range;
use std::sync::Mutex;

use gemm_common::Parallelism;
use half::{bf16, f16};

use super::dtype::Dtype;
use super::{launch, view, unsupported};
use crate::error::Result;
use crate::ffi::ffi::Matrix;

/// Launches `out = beta * out + alpha * (a @ b)` over `batch` matrices (see [`Matrix`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_matmul(
    dtype: i8, batch: i64, m: i64, n: i64, k: i64, out: Matrix, a: Matrix, b: Matrix, alpha: f64, beta: f64,
    device: i64,
) -> Result<()> {
    let Some(dt) = Dtype::from_code(dtype) else { return Err(unsupported("matrix products", dtype)) };
    let [batch, m, n, k] = [batch, m, n, k].map(|v| v.max(0) as usize);
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    let work = Matmul {
        dtype: dt, batch, m, n, k,
        out: checked(&out, dt, batch, m, n)?,
        a: checked(&a, dt, batch, m, k.max(1))?,
        b: checked(&b, dt, batch, k.max(1), n)?,
        alpha, beta,
    };
    launch(device, m * n * k.max(1) * batch, move || work.run())
}

/// `x` with its address translated to the runtime's view of `batch` matrices of `rows` x
/// `cols` elements of `dtype`, checked to lie inside its storage.
pub(super) fn checked(x: &Matrix, dtype: Dtype, batch: usize, rows: usize, cols: usize) -> Result<Matrix> {
    let last = (batch.max(1) - 1) as i64 * x.batch_stride + (rows.max(1) - 1) as i64 * x.row_stride
        + (cols.max(1) - 1) as i64 * x.col_stride;
    let len = if batch * rows * cols == 0 { 0 } else { (last.max(0) as usize + 1) * dtype.size() };
    Ok(Matrix { data: view(x.data, len, &[x.storage, x.storage_len])?, ..*x })
}

/// Below this many multiply-adds, threads cost more than they save.
pub(super) const PARALLEL_WORK: usize = 1 << 18;

/// Elements of an operand (8 MB of float32) past which it no longer stays in this machine's
/// caches from one product to the next.
const LARGE_OPERAND: usize = 1 << 21;

/// `out[b] = beta * out[b] + alpha * (a[b] @ b[b])` for each of `batch` matrices; `out` is
/// m x n, `a` m x k, `b` k x n; addresses are runtime views, strides are in elements.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Matmul {
    pub dtype: Dtype,
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub out: Matrix,
    pub a: Matrix,
    pub b: Matrix,
    pub alpha: f64,
    pub beta: f64,
}

/// An element type `gemm` multiplies: `dst = alpha * dst + beta * lhs @ rhs`, with
/// arbitrary row and column strides (in elements).
trait Element: Copy + 'static {
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize, n: usize, k: usize, dst: *mut Self, dst_cs: isize, dst_rs: isize, read_dst: bool,
        lhs: *const Self, lhs_cs: isize, lhs_rs: isize, rhs: *const Self, rhs_cs: isize, rhs_rs: isize,
        alpha: Self, beta: Self,
    );
}

impl Element for f32 {
    unsafe fn gemm(
        m: usize, n: usize, k: usize, dst: *mut f32, dst_cs: isize, dst_rs: isize, read_dst: bool,
        lhs: *const f32, lhs_cs: isize, lhs_rs: isize, rhs: *const f32, rhs_cs: isize, rhs_rs: isize,
        alpha: f32, beta: f32,
    ) {
        let gemm = gemm_f32::gemm::f32::get_gemm_fn();
        unsafe {
            gemm(m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta,
                 false, false, false, Parallelism::None)
        }
    }
}

impl Element for f16 {
    unsafe fn gemm(
        m: usize, n: usize, k: usize, dst: *mut f16, dst_cs: isize, dst_rs: isize, read_dst: bool,
        lhs: *const f16, lhs_cs: isize, lhs_rs: isize, rhs: *const f16, rhs_cs: isize, rhs_rs: isize,
        alpha: f16, beta: f16,
    ) {
        let gemm = gemm_f16::gemm::f16::get_gemm_fn();
        unsafe {
            gemm(m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta,
                 false, false, false, Parallelism::None)
        }
    }
}

/// The 16-bit types, computed in float32.
trait Narrow: Copy {
    fn widen(self) -> f32;
    fn narrow(value: f32) -> Self;
}

impl Narrow for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Narrow for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

/// Calls `T::gemm`, first turning a row-major product into the column-major one gemm's
/// microkernels prefer (C = A B is Cᵀ = Bᵀ Aᵀ: swap the operands and every stride pair), as
/// the umbrella `gemm` crate does. Without it a 512×512 product took twice as long.
#[allow(clippy::too_many_arguments)]
unsafe fn multiply<T: Element>(
    m: usize, n: usize, k: usize, dst: *mut T, dst_cs: isize, dst_rs: isize, read_dst: bool,
    lhs: *const T, lhs_cs: isize, lhs_rs: isize, rhs: *const T, rhs_cs: isize, rhs_rs: isize,
    alpha: T, beta: T,
) {
    unsafe {
        if dst_cs.abs() < dst_rs.abs() {
            T::gemm(n, m, k, dst, dst_rs, dst_cs, read_dst, rhs, rhs_rs, rhs_cs, lhs, lhs_rs, lhs_cs, alpha, beta)
        } else {
            T::gemm(m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta)
        }
    }
}

impl Matmul {
    /// The same product transposed, `outᵀ = bᵀ @ aᵀ`: its columns are this one's rows.
    fn transposed(&self) -> Self {
        let t = |m: &Matrix| Matrix { row_stride: m.col_stride, col_stride: m.row_stride, ..*m };
        Matmul { m: self.n, n: self.m, out: t(&self.out), a: t(&self.b), b: t(&self.a), ..self.clone() }
    }

    pub(crate) fn run(&self) {
        if self.is_rows_times_rows() {
            return self.run_dot_rows();
        }
        // Split along the longer side: 2048x64 @ 64x72 in two halves of 36 columns took 1.3x
        // the CPU's time, in two halves of 1024 rows 0.98x.
        if self.m > self.n {
            return self.transposed().run_columns();
        }
        self.run_columns()
    }

    /// Whether this is float32 `a @ wᵀ` with both operands' rows contiguous along `k` (a linear
    /// layer: activations times a weight stored out x in) and few rows on one side: then
    /// [`dot_rows`], which reads `w` where it is, beats `gemm`, which first repacks all of `w`
    /// for the handful of rows it multiplies. With more rows, gemm's larger register blocks
    /// win, unless `w` is too large for the caches, where reading it once is what counts.
    fn is_rows_times_rows(&self) -> bool {
        let k = self.k as i64;
        self.dtype == Dtype::Float
            && self.k > 0
            && self.a.col_stride == 1
            && (self.m == 1 || self.a.row_stride == k) // a single row's stride is any
            && self.b.row_stride == 1
            && (self.n == 1 || self.b.col_stride == k)
            && few_rows_against_many(self.m, self.n, self.k)
    }

    /// [`Self::run`] by [`dot_rows`]: the longer side's rows are split over the kernel threads,
    /// each part summing into a buffer of its own, then scaled into `out`.
    fn run_dot_rows(&self) {
        let (m, n, k) = (self.m, self.n, self.k);
        let split_n = n >= m;
        let long = if split_n { n } else { m };
        let parts = if m * n * k >= PARALLEL_WORK { super::thread_pool::threads().min(long / 16).max(1) } else { 1 };
        let width = long.div_ceil(parts);
        let (alpha, beta) = (self.alpha as f32, self.beta as f32);
        for i in 0..self.batch as isize {
            super::thread_pool::run(parts, |p| {
                let (first, count) = (p * width, width.min(long.saturating_sub(p * width)));
                if count == 0 {
                    return;
                }
                let ((row0, rows), (col0, cols)) = if split_n { ((0, m), (first, count)) } else { ((first, count), (0, n)) };
                let at = |x: &Matrix, row: usize| (x.data as *const f32).wrapping_offset(i * x.batch_stride as isize + (row * k) as isize);
                // SAFETY: C++ checked each operand's extent; rows of both run contiguously along
                // k (is_rows_times_rows), so these rows are one stretch each.
                let (a, b) = unsafe {
                    (std::slice::from_raw_parts(at(&self.a, row0), rows * k), std::slice::from_raw_parts(at(&self.b, col0), cols * k))
                };
                let mut sums = vec![0.0f32; rows * cols];
                dot_rows(a, b, k, &mut sums);
                let out = (self.out.data as *mut f32).wrapping_offset(
                    i * self.out.batch_stride as isize + (row0 as i64 * self.out.row_stride + col0 as i64 * self.out.col_stride) as isize,
                );
                for r in 0..rows {
                    for c in 0..cols {
                        // SAFETY: inside `out`, which C++ checked; parts write disjoint elements.
                        unsafe {
                            let o = out.offset(r as isize * self.out.row_stride as isize + c as isize * self.out.col_stride as isize);
                            let product = alpha * sums[r * cols + c];
                            // A zero beta must not read `out` (it may hold NaN).
                            *o = if beta == 0.0 { product } else { beta * *o + product };
                        }
                    }
                }
            });
        }
    }

    fn run_columns(&self) {
        // Large products are split by columns over the kernel threads (thread_pool.rs), each part a
        // single-threaded gemm: gemm's own rayon threads take tens of µs to wake.
        let parts = if self.m * self.n * self.k >= PARALLEL_WORK { super::thread_pool::threads().min(self.n / 16).max(1) } else { 1 };
        let width = self.n.div_ceil(parts);
        for i in 0..self.batch as isize {
            super::thread_pool::run(parts, |p| {
                let (first, n) = (p * width, width.min(self.n.saturating_sub(p * width)));
                if n == 0 {
                    return;
                }
                // SAFETY: C++ checked each operand's extent against its storage; parts write
                // disjoint columns of `out`.
                unsafe {
                    match self.dtype {
                        Dtype::Float => self.product::<f32>(i, first, n, self.alpha as f32, self.beta as f32),
                        Dtype::Half if self.beta == 0.0 => {
                            self.product::<f16>(i, first, n, f16::from_f64(self.alpha), f16::from_f64(self.beta))
                        }
                        Dtype::Half => self.product_widened::<f16>(i, first, n),
                        Dtype::BFloat16 => self.product_widened::<bf16>(i, first, n),
                        Dtype::Bool | Dtype::Integer(_) => {
                            unreachable!("launch_matmul takes Dtype::from_code: floating point only")
                        }
                    }
                }
            });
        }
    }

// ANCHOR: product
    /// Columns `first..first + n` of one product in `T`. `gemm` computes
    /// `dst = alpha * dst + beta * lhs @ rhs`: its alpha is PyTorch's beta and the other way
    /// round, and a zero beta must not read `out`.
    unsafe fn product<T: Element>(&self, i: isize, first: usize, n: usize, alpha: T, beta: T) {
        let at = |m: &Matrix, col: usize| {
            (m.data as *mut T).wrapping_offset(i * m.batch_stride as isize + (col as isize) * m.col_stride as isize)
        };
        unsafe {
            multiply(
                self.m, n, self.k,
                at(&self.out, first), self.out.col_stride as isize, self.out.row_stride as isize,
                self.beta != 0.0,
                at(&self.a, 0), self.a.col_stride as isize, self.a.row_stride as isize,
                at(&self.b, first), self.b.col_stride as isize, self.b.row_stride as isize,
                beta, alpha,
            )
        }
    }
// ANCHOR_END: product

    /// Widens the three matrices to float32, multiplies and adds there, and rounds the result
    /// back once.
    unsafe fn product_widened<T: Narrow>(&self, i: isize, first: usize, n: usize) {
        let widen = |m: &Matrix, rows: usize, cols: usize, col0: usize| -> Vec<f32> {
            let base = (m.data as *const T)
                .wrapping_offset(i * m.batch_stride as isize + col0 as isize * m.col_stride as isize);
            (0..rows * cols)
                .map(|e| {
                    let (r, c) = ((e / cols) as isize, (e % cols) as isize);
                    // SAFETY: inside the matrix, which C++ checked.
                    unsafe { base.offset(r * m.row_stride as isize + c * m.col_stride as isize).read_unaligned() }.widen()
                })
                .collect()
        };
        let (a, b) = (widen(&self.a, self.m, self.k, 0), widen(&self.b, self.k, n, first));
        let mut out = if self.beta != 0.0 { widen(&self.out, self.m, n, first) } else { vec![0.0; self.m * n] };
        unsafe {
            multiply::<f32>(
                self.m, n, self.k,
                out.as_mut_ptr(), 1, n as isize, self.beta != 0.0,
                a.as_ptr(), 1, self.k as isize,
                b.as_ptr(), 1, n as isize,
                self.beta as f32, self.alpha as f32,
            );
        }
        let base = (self.out.data as *mut T)
            .wrapping_offset(i * self.out.batch_stride as isize + first as isize * self.out.col_stride as isize);
        for (e, v) in out.into_iter().enumerate() {
            let (r, c) = ((e / n) as isize, (e % n) as isize);
            // SAFETY: inside the output matrix, which C++ checked.
            unsafe {
                base.offset(r * self.out.row_stride as isize + c * self.out.col_stride as isize)
                    .write_unaligned(T::narrow(v))
            };
        }
    }
}

/// A float32 matrix at a runtime address, strides in elements.
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub ptr: usize,
    pub rs: isize,
    pub cs: isize,
}

/// `dst = lhs @ rhs`, or `dst += lhs @ rhs` when `accumulate` (m x n, m x k, k x n), for the
/// other kernels (convolution): large products are split by columns over the kernel threads.
///
/// # Safety
/// Every matrix lies in memory the caller may use so, and `dst` overlaps neither input.
pub(super) unsafe fn gemm_f32(m: usize, n: usize, k: usize, dst: View, accumulate: bool, lhs: View, rhs: View) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m as isize {
                for c in 0..n as isize {
                    // SAFETY: inside dst.
                    unsafe { *(dst.ptr as *mut f32).offset(r * dst.rs + c * dst.cs) = 0.0 };
                }
            }
        }
        return;
    }
    let parts = if m * n * k >= PARALLEL_WORK { super::thread_pool::threads().min(n / 16).max(1) } else { 1 };
    let width = n.div_ceil(parts);
    super::thread_pool::run(parts, |p| {
        let (first, n) = (p * width, width.min(n.saturating_sub(p * width)));
        if n == 0 {
            return;
        }
        let column = |v: &View| (v.ptr as *mut f32).wrapping_offset(first as isize * v.cs);
        // SAFETY: the caller's promise; parts write disjoint columns of dst.
        unsafe {
            multiply::<f32>(
                m, n, k, column(&dst), dst.cs, dst.rs, accumulate, lhs.ptr as *const f32, lhs.cs, lhs.rs,
                column(&rhs), rhs.cs, rhs.rs, 1.0, 1.0,
            )
        }
    });
}

// ANCHOR: dot_rows
/// `dst[i][j] += a[i] · b[j]` for the `m` rows of `a` and the `n` rows of `b`, each `k` long and
/// contiguous: `A @ Bᵀ` when both operands lie along `k`, as in a convolution's weight gradient
/// (the output gradient's rows and the column matrix's rows both run over the positions).
/// `gemm` repacks both operands first, which on those shapes (16 x 27 sums over 1024 positions)
/// was half its time; this reads them in place, but ends each block of sums by adding its
/// lanes. See [`prefer_dot_rows`] for which wins.
pub(super) fn dot_rows(a: &[f32], b: &[f32], k: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use super::softmax::{Simd, simd};
        // SAFETY: the CPU has the features (simd() asked it).
        match simd() {
            Simd::Avx512 => return unsafe { dot_rows_avx512(a, b, k, dst) },
            Simd::Avx2 => return unsafe { dot_rows_avx2(a, b, k, dst) },
            Simd::Baseline => {}
        }
    }
    dot_rows_any::<false, 2, 2, 4>(a, b, k, dst)
}

/// Whether [`dot_rows`] beats `gemm` for `m x n` sums over `k`: `gemm`'s repacking costs about
/// a `min(m, n)`-th of its multiplies, `dot_rows`'s lane sums about a `k`-th (measured: 16 x 27
/// over 1024 3.1x faster, 32 x 144 over 256 1.4x; 128 x 1152 over 256 1.2x slower).
pub(super) fn prefer_dot_rows(m: usize, n: usize, k: usize) -> bool {
    k >= 8 * m.min(n)
}

/// Whether `m x n` sums over `k` with few rows on one side are [`dot_rows`]'s: 2 to 16 rows, or
/// 17 to 48 when the other operand is too large for the caches (reading it once is what counts).
/// One row keeps gemm's own matrix-vector path.
pub(super) fn few_rows_against_many(m: usize, n: usize, k: usize) -> bool {
    let (short, long) = (m.min(n), m.max(n));
    ((2..=16).contains(&short) || ((17..=48).contains(&short) && long * k >= LARGE_OPERAND)) && prefer_dot_rows(m, n, k)
}

/// `dst = a @ bᵀ` by [`dot_rows`] for `a` the long operand (as a convolution's weight against
/// the few columns of a small plane): `a`'s rows are split over the kernel threads, and each
/// part computes `b @ a_partᵀ`, which streams its rows of `a` past all of `b` once (`a @ bᵀ`
/// would read them once per block of `b`'s rows), then writes its rows of `dst` transposed.
pub(super) fn dot_rows_split(a: &[f32], b: &[f32], k: usize, dst: &mut [f32]) {
    let (m, n) = (a.len() / k.max(1), b.len() / k.max(1));
    if m == 0 || n == 0 || k == 0 {
        return dst.fill(0.0);
    }
    let parts = if m * n * k >= PARALLEL_WORK { super::thread_pool::threads().min(m / 16).max(1) } else { 1 };
    let rows: Vec<Range<usize>> = (0..parts).map(|p| super::thread_pool::share(p, parts, m)).collect();
    let mut rest = dst;
    let mut outputs = Vec::with_capacity(parts);
    for r in &rows {
        let (mine, others) = rest.split_at_mut(r.len() * n);
        outputs.push(Mutex::new(mine));
        rest = others;
    }
    super::thread_pool::run(parts, |p| {
        let (first, count) = (rows[p].start, rows[p].len());
        let mut sums = vec![0.0f32; n * count];
        dot_rows(b, &a[first * k..(first + count) * k], k, &mut sums);
        let mut out = outputs[p].lock().unwrap_or_else(|e| e.into_inner());
        for (r, row) in out.chunks_exact_mut(n).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = sums[c * count + r];
            }
        }
    });
}

// Blocks of R x C sums of L lanes: R * C registers of sums (16 of AVX-512's 32; 12 of AVX2's 16)
// against R + C loads per step, so the multiplies, not the loads, set the pace.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot_rows_avx512(a: &[f32], b: &[f32], k: usize, dst: &mut [f32]) {
    dot_rows_any::<true, 4, 4, 16>(a, b, k, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_avx2(a: &[f32], b: &[f32], k: usize, dst: &mut [f32]) {
    dot_rows_any::<true, 3, 4, 8>(a, b, k, dst)
}

#[inline(always)]
fn dot_rows_any<const FMA: bool, const R: usize, const C: usize, const L: usize>(
    a: &[f32], b: &[f32], k: usize, dst: &mut [f32],
) {
    let (m, n) = (a.len() / k.max(1), b.len() / k.max(1));
    assert!(k > 0 && a.len() == m * k && b.len() == n * k && dst.len() == m * n);
    // The rows of `b` of one block stay in L1 while `a`'s rows stream past them from L2; very
    // long rows are taken a stretch at a time, so that the stretch of `a` fits in L2.
    const STRETCH: usize = 2048;
    for start in (0..k).step_by(STRETCH) {
        let len = STRETCH.min(k - start);
        let steps = len / L;
        // The rows of a block at the edge, copied out and padded to a whole block by repeating
        // the last row (whose sums are dropped): every block then reads its rows a fixed
        // distance apart, with one shape of loop for all.
        let edge = |v: &[f32], rows: usize, block: usize| -> Vec<f32> {
            let first = rows / block * block;
            if first == rows {
                return Vec::new();
            }
            (0..block).flat_map(|r| v[(first + r).min(rows - 1) * k + start..][..len].iter().copied()).collect()
        };
        let (a_edge, b_edge) = (edge(a, m, R), edge(b, n, C));
        for j in (0..n).step_by(C) {
            let (y, y_stride) = if j + C <= n { (b[j * k + start..].as_ptr(), k) } else { (b_edge.as_ptr(), len) };
            for i in (0..m).step_by(R) {
                let (x, x_stride) = if i + R <= m { (a[i * k + start..].as_ptr(), k) } else { (a_edge.as_ptr(), len) };
                // SAFETY: R rows from `x` and C from `y`, their strides apart, each `len` long
                // (of `a` and `b`, or of the padded copies).
                let acc = unsafe { block::<FMA, R, C, L>(x, x_stride, y, y_stride, steps) };
                // Keeps the sums one register each (inside a large function the compiler
                // otherwise re-packs them as narrower vectors).
                let acc = std::hint::black_box(acc);
                for r in 0..R.min(m - i) {
                    for c in 0..C.min(n - j) {
                        // SAFETY: as above; the tail is the rest of each row's `len` floats.
                        let tail: f32 = unsafe {
                            let (xr, yr) = (x.add(r * x_stride + steps * L), y.add(c * y_stride + steps * L));
                            (0..len - steps * L).map(|t| *xr.add(t) * *yr.add(t)).sum()
                        };
                        dst[(i + r) * n + j + c] += lanes_sum(&acc[r][c]) + tail;
                    }
                }
            }
        }
    }
}

/// The R x C sums of `steps` chunks of L lanes over R rows from `x` and C rows from `y`, each
/// operand's rows a fixed distance apart: one base pointer per operand, which leaves the
/// compiler registers for all the sums (a pointer per row did not: it recomputed them inside
/// the loop).
///
/// # Safety
/// `R` rows from `x`, `x_stride` apart, and `C` from `y`, `y_stride` apart, each hold
/// `steps * L` floats.
#[inline(always)]
unsafe fn block<const FMA: bool, const R: usize, const C: usize, const L: usize>(
    x: *const f32, x_stride: usize, y: *const f32, y_stride: usize, steps: usize,
) -> [[[f32; L]; C]; R] {
    use super::math::mul_add;
    let mut acc = [[[0.0f32; L]; C]; R];
    for s in 0..steps {
        // SAFETY: the caller's promise.
        let (xv, yv): ([[f32; L]; R], [[f32; L]; C]) = unsafe {
            (
                std::array::from_fn(|r| x.add(r * x_stride + s * L).cast::<[f32; L]>().read_unaligned()),
                std::array::from_fn(|c| y.add(c * y_stride + s * L).cast::<[f32; L]>().read_unaligned()),
            )
        };
        for r in 0..R {
            for c in 0..C {
                for l in 0..L {
                    acc[r][c][l] = mul_add::<FMA>(xv[r][l], yv[c][l], acc[r][c][l]);
                }
            }
        }
    }
    acc
}

/// The lanes of `v` added pairwise: halves, then quarters, ...
#[inline(always)]
fn lanes_sum<const L: usize>(v: &[f32; L]) -> f32 {
    let mut v = *v;
    let mut width = L;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            v[l] += v[l + width];
        }
    }
    v[0]
}
// ANCHOR_END: dot_rows

#[cfg(test)]
mod tests {
    use super::*;

    /// Against float64 sums: blocks cut at the edges (m, n not multiples of the block), rows
    /// with a tail (k not a multiple of 16), and rows longer than a stretch (k > 2048).
    #[test]
    fn dot_rows_matches_the_definition() {
        for (m, n, k) in [(1, 1, 1), (16, 27, 1024), (5, 7, 33), (3, 2, 15), (9, 13, 4099), (4, 4, 16)] {
            let a: Vec<f32> = (0..m * k).map(|v| ((v * 7919) % 101) as f32 / 50.0 - 1.0).collect();
            let b: Vec<f32> = (0..n * k).map(|v| ((v * 104_729) % 97) as f32 / 48.0 - 1.0).collect();
            // The dispatched version (the widest this CPU has) and the baseline one.
            let (mut dst, mut baseline) = (vec![1.0f32; m * n], vec![1.0f32; m * n]);
            dot_rows(&a, &b, k, &mut dst);
            dot_rows_any::<false, 2, 2, 4>(&a, &b, k, &mut baseline);
            for (dst, i, j) in [&dst, &baseline].into_iter().flat_map(|d| (0..m * n).map(move |e| (d, e / n, e % n))) {
                let want = 1.0 + (0..k).map(|p| a[i * k + p] as f64 * b[j * k + p] as f64).sum::<f64>();
                let got = dst[i * n + j] as f64;
                assert!((got - want).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + want.abs()), "{m}x{n}x{k} [{i}][{j}]: {got} vs {want}");
            }
        }
    }
}
