//! Matrix products through the `gemm` crates (packed, vectorised): float32 and float16
//! directly; bfloat16, which `gemm` lacks, through float32 copies, and so is a float16
//! product added to an output (addmm): gemm's float16 kernel rounds the product to float16
//! before it adds, where CPU rounds once.

use gemm_common::Parallelism;
use half::{bf16, f16};

use super::dtype::Dtype;
use crate::ffi::ffi::Matrix;

/// Below this many multiply-adds, threads cost more than they save.
const PARALLEL_WORK: usize = 1 << 18;

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
    pub(crate) fn run(&self) {
        // Large products are split by columns over the kernel threads (pool.rs), each part a
        // single-threaded gemm: gemm's own rayon threads take tens of µs to wake.
        let parts = if self.m * self.n * self.k >= PARALLEL_WORK { super::pool::threads().min(self.n / 16).max(1) } else { 1 };
        let width = self.n.div_ceil(parts);
        for i in 0..self.batch as isize {
            super::pool::run(parts, |p| {
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
    let parts = if m * n * k >= PARALLEL_WORK { super::pool::threads().min(n / 16).max(1) } else { 1 };
    let width = n.div_ceil(parts);
    super::pool::run(parts, |p| {
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
