//! Row gathers and scatters for embeddings: `index_select` (an embedding's forward reads the
//! weight's rows) and `embedding_dense_backward` (adds each output row's gradient into the
//! weight row it came from). `index_select`'s indices arrive as host values, checked by C++
//! like CPU checks them (an `IndexError`) and again here; the backward reads its indices on the
//! stream and reports a bad one as the stream's error. No index can write outside a tensor.

use openreg_runtime as rt;

use super::dtype::{Dtype, INT64, load, store};
use super::{launch, view, dense};
use crate::error::{Failure, Result};
use crate::ffi::ffi::Dense;

/// Host indices as offsets, each checked against `size`.
fn checked_indices(indices: &[i64], size: usize) -> Result<Vec<usize>> {
    indices
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&i| i < size).ok_or_else(|| Failure::index(format!("index {i} is out of range for size {size}"))))
        .collect()
}

// ANCHOR: index_select
/// Launches the row gather of `index_select` over contiguous `[outer, size, inner]` `src` into
/// `[outer, indices, inner]` `dst` (any dtype: rows are bytes, `item` per element), the int64
/// `indices` read on the stream.
#[allow(clippy::too_many_arguments)]
pub(crate) fn index_select(
    src: Dense, dst: Dense, item: usize, indices: Dense, outer: usize, size: usize, inner: usize, device: i64,
) -> Result<()> {
    if indices.dtype != INT64 {
        return Err(rt::Error::InvalidValue("index_select: int64 indices expected".into()).into());
    }
    let rows = Rows::Device { at: view(indices.data, indices.numel * 8, &[indices.storage, indices.storage_len])?, len: indices.numel };
    launch_gather(src, dst, item, rows, indices.numel, outer, size, inner, device)
}

/// Launches the same gather at host offsets, each checked against `size`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_rows(
    src: Dense, dst: Dense, item: usize, indices: &[i64], outer: usize, size: usize, inner: usize, device: i64,
) -> Result<()> {
    let rows = Rows::Host(checked_indices(indices, size)?);
    launch_gather(src, dst, item, rows, indices.len(), outer, size, inner, device)
}

#[allow(clippy::too_many_arguments)]
fn launch_gather(
    src: Dense, dst: Dense, item: usize, rows: Rows, n: usize, outer: usize, size: usize, inner: usize, device: i64,
) -> Result<()> {
    if src.dtype != dst.dtype || item == 0 {
        return Err(rt::Error::InvalidValue("index_select: operands of one dtype expected".into()).into());
    }
    if src.numel != outer * size * inner || dst.numel != outer * n * inner {
        return Err(rt::Error::InvalidValue("index_select operands do not match their shapes".into()).into());
    }
    if dst.numel == 0 {
        return Ok(());
    }
    let work = IndexSelect {
        src: view(src.data, src.numel * item, &[src.storage, src.storage_len])?,
        dst: view(dst.data, dst.numel * item, &[dst.storage, dst.storage_len])?,
        rows, outer, size, inner, item,
    };
    launch(device, dst.numel, move || work.run())
}
// ANCHOR_END: index_select

/// Launches `embedding_dense_backward` into a `[num_weights, dim]` `grad_weight` from
/// `[indices, dim]` `grad_output`, the int64 `indices` read on the stream. False if a dtype is
/// not ours. (`padding_idx` < 0: none.)
pub(crate) fn embedding_backward(
    grad_weight: Dense, grad_output: Dense, indices: Dense, dim: usize, padding_idx: i64, scale_by_freq: bool,
    device: i64,
) -> Result<bool> {
    let (Some(wt), Some(gt)) = (Dtype::from_code(grad_weight.dtype), Dtype::from_code(grad_output.dtype)) else {
        return Ok(false);
    };
    let n = indices.numel;
    let num_weights = if dim > 0 { grad_weight.numel / dim } else { 0 };
    if indices.dtype != INT64 || grad_output.numel != n * dim || grad_weight.numel != num_weights * dim {
        return Err(rt::Error::InvalidValue("embedding_dense_backward operands do not match their shapes".into()).into());
    }
    if grad_weight.numel == 0 {
        return Ok(true);
    }
    let work = EmbeddingBackward {
        grad_weight: (dense(&grad_weight, wt)?, wt),
        grad_output: (dense(&grad_output, gt)?, gt),
        indices: view(indices.data, n * 8, &[indices.storage, indices.storage_len])?,
        len: n,
        num_weights, dim,
        padding_idx: usize::try_from(padding_idx).ok(),
        scale_by_freq,
    };
    launch(device, grad_output.numel.max(grad_weight.numel), move || work.run())?;
    Ok(true)
}

/// Where a gather's row indices are: host offsets checked at launch, or int64 values on the
/// device, read on the stream.
#[derive(Clone)]
pub(crate) enum Rows {
    Host(Vec<usize>),
    Device { at: usize, len: usize },
}

/// Copies, for each of `outer` blocks, rows `rows` (of `size`) of `inner` elements of `item`
/// bytes from `src` into consecutive rows of `dst`. A device index out of range gives a row of
/// zeros and fails the task with CPU's `IndexError`.
#[derive(Clone)] // a graph replays a captured kernel: device indices are read at each replay
pub(crate) struct IndexSelect {
    pub src: usize,
    pub dst: usize,
    pub rows: Rows,
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
    pub item: usize,
}

impl IndexSelect {
    pub(crate) fn run(&self) {
        let indices: Vec<Option<usize>> = match &self.rows {
            Rows::Host(rows) => rows.iter().map(|&i| Some(i)).collect(),
            // SAFETY: `len` int64 values at a view checked at launch, written by work queued before.
            Rows::Device { at, len } => (0..*len)
                .map(|i| unsafe { (*at as *const i64).add(i).read_unaligned() })
                .map(|i| usize::try_from(i).ok().filter(|&i| i < self.size))
                .collect(),
        };
        if indices.contains(&None) {
            rt::fail_task(rt::FailureClass::Index, "index out of range in self".into());
        }
        let (row, n) = (self.inner * self.item, indices.len());
        for o in 0..self.outer {
            for (i, index) in indices.iter().enumerate() {
                let to = (self.dst + (o * n + i) * row) as *mut u8;
                // SAFETY: a checked index's row of `src`, and row i of block o of `dst`; both
                // extents were checked at launch.
                unsafe {
                    match index {
                        Some(index) => std::ptr::copy_nonoverlapping((self.src + (o * self.size + index) * row) as *const u8, to, row),
                        None => std::ptr::write_bytes(to, 0, row),
                    }
                }
            }
        }
    }
}

/// grad_weight[indices[i]] += grad_output[i] over rows of `dim` elements; an index equal to
/// `padding_idx` adds nothing; with `scale_by_freq`, each row's sum is divided by how often
/// its index occurs. An index out of range adds nothing and fails the task with CPU's
/// `IndexError`, which the stream reports at its next synchronize.
#[derive(Clone)] // a graph replays a captured kernel: it reads the indices' values at each replay
pub(crate) struct EmbeddingBackward {
    pub grad_weight: (usize, Dtype),
    pub grad_output: (usize, Dtype),
    /// The runtime view of `len` int64 indices.
    pub indices: usize,
    pub len: usize,
    pub num_weights: usize,
    pub dim: usize,
    pub padding_idx: Option<usize>,
    pub scale_by_freq: bool,
}

impl EmbeddingBackward {
    /// Zeroes the gradient in place (all-zero bits are 0.0 in every float dtype), then sums
    /// the rows the indices name in float32, once per distinct row: a vocabulary's gradient
    /// is mostly zeros, and only the touched rows are computed and stored.
    pub(crate) fn run(&self) {
        let d = self.dim;
        let (wptr, wtype) = self.grad_weight;
        let bytes = self.num_weights * d * wtype.size();
        super::elementwise::parallel_min(bytes, 1 << 18, |start, count| {
            // SAFETY: `bytes` bytes of grad_weight, checked at launch.
            unsafe { std::ptr::write_bytes((wptr + start) as *mut u8, 0, count) }
        });
        // SAFETY: `len` int64 values at a view checked at launch, written by work queued before.
        let indices: Vec<i64> = (0..self.len).map(|i| unsafe { (self.indices as *const i64).add(i).read_unaligned() }).collect();
        if let Some(&bad) = indices.iter().find(|&&i| !(0..self.num_weights as i64).contains(&i)) {
            rt::fail_task(rt::FailureClass::Index,
                          format!("embedding_dense_backward: index {bad} is out of range for {} weights", self.num_weights));
        }
        // Each distinct row's slot in `sums`, in order of first use; summed in index order.
        let mut slots = std::collections::HashMap::with_capacity(indices.len());
        let mut rows: Vec<(usize, u32)> = Vec::new(); // (row, count) per slot
        let mut sums: Vec<f32> = Vec::new();
        let mut row = vec![0.0f32; d];
        let (gptr, gtype) = self.grad_output;
        for (i, &index) in indices.iter().enumerate() {
            let Some(index) = usize::try_from(index).ok().filter(|&i| i < self.num_weights) else { continue };
            let slot = *slots.entry(index).or_insert_with(|| {
                rows.push((index, 0));
                sums.resize(sums.len() + d, 0.0);
                rows.len() - 1
            });
            rows[slot].1 += 1;
            if Some(index) == self.padding_idx {
                continue;
            }
            // SAFETY: row i of grad_output, checked at launch.
            unsafe { load(gtype, (gptr + i * d * gtype.size()) as *const u8, gtype.size() as isize, &mut row) };
            for (s, g) in sums[slot * d..(slot + 1) * d].iter_mut().zip(&row) {
                *s += g;
            }
        }
        for (slot, &(index, count)) in rows.iter().enumerate() {
            let sum = &mut sums[slot * d..(slot + 1) * d];
            if self.scale_by_freq && count > 1 {
                sum.iter_mut().for_each(|s| *s /= count as f32);
            }
            // SAFETY: row `index` (< num_weights) of grad_weight, checked at launch.
            unsafe { store(wtype, (wptr + index * d * wtype.size()) as *mut u8, wtype.size() as isize, sum) };
        }
    }
}
