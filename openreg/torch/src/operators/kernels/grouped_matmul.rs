//! `_grouped_mm`: one matrix product per group of rows, columns or depth, the groups cut by
//! cumulative offsets, as a mixture-of-experts layer multiplies each expert's tokens by that
//! expert's weight. The offsets stay in device memory and the kernel reads them on the
//! stream: a launch, not a wait for the device (see `Matmul.cpp`).

use openreg_runtime as rt;

use super::dtype::{Dtype, INT32};
use super::matmul::{Matmul, PARALLEL_WORK, checked};
use super::{dense, launch, thread_pool, unsupported};
use crate::error::Result;
use crate::ffi::ffi::{Dense, Grouping, Matrix};

// ANCHOR: launch_grouped_matmul
/// Launches `_grouped_mm` over `groups` groups cut by the int32 `offsets` (see [`Grouping`]
/// for the operands' shapes: `m`, `n` and `k` are the full sizes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_grouped_matmul(
    dtype: i8, grouping: Grouping, m: i64, n: i64, k: i64, out: Matrix, a: Matrix, b: Matrix, offsets: Dense,
    device: i64,
) -> Result<()> {
    let Some(dt) = Dtype::from_code(dtype) else { return Err(unsupported("grouped matrix products", dtype)) };
    if offsets.dtype != INT32 || offsets.numel == 0 {
        return Err(rt::Error::InvalidValue(format!(
            "grouped matrix products take int32 offsets, one per group; got {} of dtype code {}",
            offsets.numel, offsets.dtype
        ))
        .into());
    }
    let (groups, [m, n, k]) = (offsets.numel, [m, n, k].map(|v| v.max(0) as usize));
    // Which operand holds one matrix per group.
    let [per_out, per_a, per_b] = match grouping {
        Grouping::Rows => [1, 1, groups],
        Grouping::Columns => [1, groups, 1],
        _ => [groups, 1, 1],
    };
    let work = GroupedMatmul {
        dtype: dt, grouping, m, n, k,
        out: checked(&out, dt, per_out, m, n)?,
        a: checked(&a, dt, per_a, m, k)?,
        b: checked(&b, dt, per_b, k, n)?,
        offsets: dense(&offsets, Dtype::Integer(super::integer::Int::I32))?,
        groups,
    };
    launch(device, m * n * k.max(1), move || work.run())
}
// ANCHOR_END: launch_grouped_matmul

#[derive(Clone)]
struct GroupedMatmul {
    dtype: Dtype,
    grouping: Grouping,
    m: usize,
    n: usize,
    k: usize,
    out: Matrix,
    a: Matrix,
    b: Matrix,
    /// The runtime's address of `groups` int32 offsets.
    offsets: usize,
    groups: usize,
}

/// `x` moved `elements` elements on.
fn at(x: &Matrix, elements: i64, dtype: Dtype) -> Matrix {
    Matrix { data: (x.data as i64 + elements * dtype.size() as i64) as usize, ..*x }
}

/// One group's share of the work.
enum Part {
    Product(Matmul),
    /// `rows` x `cols` zeros at `out`: a group with nothing to sum, or rows or columns past
    /// the last offset.
    Zeros(Matrix, usize, usize),
}

impl GroupedMatmul {
    // ANCHOR: grouped_run
    fn run(&self) {
        // SAFETY: the launcher checked `groups` int32 values at this address; they are read
        // here, on the stream, after every kernel queued before this one has written them.
        let offsets = unsafe { std::slice::from_raw_parts(self.offsets as *const i32, self.groups) };
        let (len, stride) = match self.grouping {
            Grouping::Rows => (self.m, [self.out.row_stride, self.a.row_stride, 0]),
            Grouping::Columns => (self.n, [self.out.col_stride, 0, self.b.col_stride]),
            _ => (self.k, [0, self.a.col_stride, self.b.row_stride]),
        };
        // Group g covers [offsets[g-1], offsets[g]) of the grouped dimension. Offsets are
        // not checked (they are device values, as for CUDA's kernel): ones out of order or
        // range give empty or clipped groups, never a read or write outside the operands.
        let mut parts = Vec::with_capacity(self.groups + 1);
        let mut start = 0usize;
        for (g, &end) in offsets.iter().enumerate() {
            let end = (end.max(0) as usize).clamp(start, len);
            let [out, a, b] = [(&self.out, 0), (&self.a, 1), (&self.b, 2)].map(|(x, i)| at(x, start as i64 * stride[i], self.dtype));
            let g = g as i64;
            let (m, n, k, out, a, b) = match self.grouping {
                Grouping::Rows => (end - start, self.n, self.k, out, a, at(&b, g * b.batch_stride, self.dtype)),
                Grouping::Columns => (self.m, end - start, self.k, out, at(&a, g * a.batch_stride, self.dtype), b),
                _ => (self.m, self.n, end - start, at(&out, g * out.batch_stride, self.dtype), a, b),
            };
            parts.push(if k == 0 {
                Part::Zeros(out, m, n)
            } else {
                Part::Product(Matmul { dtype: self.dtype, batch: 1, m, n, k, out, a, b, alpha: 1.0, beta: 0.0 })
            });
            start = end;
        }
        // What no group covers is zero, not whatever the memory held.
        match self.grouping {
            Grouping::Rows => parts.push(Part::Zeros(at(&self.out, start as i64 * stride[0], self.dtype), self.m - start, self.n)),
            Grouping::Columns => parts.push(Part::Zeros(at(&self.out, start as i64 * stride[0], self.dtype), self.m, self.n - start)),
            _ => {}
        }
        // Small groups (an expert's few tokens) run side by side, one per kernel thread, each
        // product then single-threaded; larger ones one after another, each split over the
        // threads by the product itself.
        let work = |p: &Part| if let Part::Product(x) = p { x.m * x.n * x.k } else { 0 };
        if parts.iter().all(|p| work(p) < PARALLEL_WORK) {
            thread_pool::run(parts.len(), |i| self.part(&parts[i]));
        } else {
            parts.iter().for_each(|p| self.part(p));
        }
    }
    // ANCHOR_END: grouped_run

    fn part(&self, part: &Part) {
        match part {
            Part::Product(x) if x.m > 0 && x.n > 0 => x.run(),
            Part::Product(_) => {}
            Part::Zeros(out, rows, cols) => {
                let size = self.dtype.size() as isize;
                for r in 0..*rows as isize {
                    for c in 0..*cols as isize {
                        let offset = (r * out.row_stride as isize + c * out.col_stride as isize) * size;
                        // SAFETY: inside `out`, which the launcher checked; float zero is
                        // all-zero bytes in every dtype the kernel takes.
                        unsafe { std::ptr::write_bytes((out.data as *mut u8).offset(offset), 0, size as usize) };
                    }
                }
            }
        }
    }
}
