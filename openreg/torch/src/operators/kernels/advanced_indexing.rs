//! Advanced indexing on the device: `x[i0, i1, ...]` with integer index tensors, read
//! (`index`) and written (`index_put_`, `index_add_`), the index values read by the kernel, on
//! the stream, as a GPU reads them. The result's shape follows from the shapes alone, so
//! nothing waits for the device; an index out of range is reported the way a GPU reports a
//! device-side assert, as an error of the stream at its next synchronize (`IndexError`, with
//! CPU's message). A read leaves that element zero; a write checks every index before it
//! writes anything, so a failed write leaves the target as it was.

use std::sync::atomic::{AtomicI64, Ordering};

use openreg_runtime as rt;

use super::dtype::{self, Dtype, INT64};
use super::integer::Int;
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, IndexLayout, IndexWrite};

/// A checked layout: per result dimension its size and its strides in the operand the indices
/// address (`source_strides`, 0 for a broadcast index dimension) and in the index tensors
/// (`index_strides`, 0 for a dimension of the operand); index tensor `k` addresses operand
/// dimension `dims[k]`, of `dim_sizes[k]` elements `dim_strides[k]` apart.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
struct Walk {
    shape: Vec<usize>,
    source_strides: Vec<usize>,
    index_strides: Vec<usize>,
    indices: Vec<usize>,
    dims: Vec<i64>,
    dim_sizes: Vec<i64>,
    dim_strides: Vec<usize>,
}

impl Walk {
    /// Checks `layout` against int64 index tensors of one broadcast shape and an operand of
    /// `operand_numel` elements; returns the walk and the number of result elements.
    fn new(op: &str, layout: &IndexLayout, indices: &[Dense], operand_numel: usize) -> Result<(Walk, usize)> {
        let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op}: {what}")));
        let l = layout;
        let rank = l.shape.len();
        if rank == 0 || l.source_strides.len() != rank || l.index_strides.len() != rank {
            return Err(invalid(format!("{rank} dimensions with {} and {} strides", l.source_strides.len(), l.index_strides.len())));
        }
        if indices.is_empty() || [l.dims.len(), l.dim_sizes.len(), l.dim_strides.len()].iter().any(|&n| n != indices.len()) {
            return Err(invalid(format!("{} index tensors for {} dimensions", indices.len(), l.dims.len())));
        }
        let count = |v: &[i64]| v.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        let Some(numel) = count(&l.shape) else { return Err(invalid(format!("shape {:?}", l.shape))) };
        if l.dim_sizes.iter().any(|&s| s < 0) || l.source_strides.iter().chain(&l.index_strides).chain(&l.dim_strides).any(|&s| s < 0) {
            return Err(invalid("negative sizes or strides".into()));
        }
        // The broadcast index shape's element count: the largest flat position plus one.
        let index_numel = if numel == 0 { 0 } else { 1 + l.shape.iter().zip(&l.index_strides).map(|(&s, &t)| (s - 1) * t).sum::<i64>() as usize };
        if indices.iter().any(|t| t.dtype != INT64 || t.numel != index_numel) {
            return Err(invalid(format!("int64 index tensors of {index_numel} elements expected")));
        }
        // Every offset the kernel can compute lies in the operand: checked once, here.
        let reach = l.shape.iter().zip(&l.source_strides).map(|(&s, &t)| (s - 1).max(0) * t).sum::<i64>()
            + l.dim_sizes.iter().zip(&l.dim_strides).map(|(&s, &t)| (s - 1).max(0) * t).sum::<i64>();
        if numel > 0 && reach as usize >= operand_numel {
            return Err(invalid(format!("offsets up to {reach} in an operand of {operand_numel} elements")));
        }
        let walk = Walk {
            shape: l.shape.iter().map(|&v| v as usize).collect(),
            source_strides: l.source_strides.iter().map(|&v| v as usize).collect(),
            index_strides: l.index_strides.iter().map(|&v| v as usize).collect(),
            indices: indices.iter().map(|t| view(t.data, t.numel * 8, &[t.storage, t.storage_len])).collect::<Result<_>>()?,
            dims: l.dims.clone(),
            dim_sizes: l.dim_sizes.clone(),
            dim_strides: l.dim_strides.iter().map(|&v| v as usize).collect(),
        };
        Ok((walk, numel))
    }

    /// The operand offset and the flat index position of the first element of result row
    /// `row` (all dimensions but the last).
    fn row_start(&self, row: usize) -> (usize, usize) {
        let (mut rest, mut at, mut flat) = (row, 0, 0);
        for r in (0..self.shape.len() - 1).rev() {
            let position = rest % self.shape[r];
            rest /= self.shape[r];
            at += position * self.source_strides[r];
            flat += position * self.index_strides[r];
        }
        (at, flat)
    }

    /// `at` moved by the index values at flat position `flat`; Err((k, value)) for the first
    /// index out of its dimension's range (negative values count from the end).
    fn add_indices(&self, mut at: usize, flat: usize) -> std::result::Result<usize, (usize, i64)> {
        for (k, &index) in self.indices.iter().enumerate() {
            // SAFETY: `new` checked every index tensor's element count.
            let v = unsafe { *(index as *const i64).add(flat) };
            let size = self.dim_sizes[k];
            if v < -size || v >= size {
                return Err((k, v));
            }
            at += (if v < 0 { v + size } else { v }) as usize * self.dim_strides[k];
        }
        Ok(at)
    }

    /// The first index out of range, over every flat position of the index tensors.
    fn first_bad_index(&self) -> Option<(usize, i64)> {
        let positions = 1 + self.shape.iter().zip(&self.index_strides).map(|(&s, &t)| (s - 1) * t).sum::<usize>();
        (0..positions).find_map(|flat| self.add_indices(0, flat).err())
    }

    fn out_of_bounds(&self, (k, v): (usize, i64)) -> String {
        format!("index {v} is out of bounds for dimension {} with size {}", self.dims[k], self.dim_sizes[k])
    }
}

/// Launches `out = source[indices...]` for contiguous `source` and `out` of `item`-byte
/// elements (see [`Walk`] for the layout).
pub(crate) fn launch_index(source: Dense, out: Dense, item: usize, layout: &IndexLayout, indices: &[Dense], device: i64) -> Result<()> {
    let (walk, numel) = Walk::new("index", layout, indices, source.numel)?;
    if out.numel != numel || source.dtype != out.dtype || item == 0 {
        return Err(rt::Error::InvalidValue(format!("index: an output of {} elements for {numel}", out.numel)).into());
    }
    if numel == 0 {
        return Ok(());
    }
    let work = Indexing {
        source: view(source.data, source.numel * item, &[source.storage, source.storage_len])?,
        out: view(out.data, out.numel * item, &[out.storage, out.storage_len])?,
        item,
        walk,
    };
    launch(device, numel, move || work.run())
}

/// One launched indexing: the runtime's views and the walk, in elements.
#[derive(Clone)]
pub(crate) struct Indexing {
    source: usize,
    out: usize,
    item: usize,
    walk: Walk,
}

impl Indexing {
    pub(crate) fn run(&self) {
        // The last dimension is walked as a run: one row of the result at a time.
        let w = &self.walk;
        let rank = w.shape.len();
        let (last, rows) = (w.shape[rank - 1], w.shape[..rank - 1].iter().product::<usize>());
        let parts = thread_pool::threads().min((rows * last).div_ceil(1 << 14)).min(rows).max(1);
        // The first bad index seen: (k, value), k + 1 stored so that 0 means none.
        let (bad_k, bad_v) = (AtomicI64::new(0), AtomicI64::new(0));
        thread_pool::run(parts, |p| {
            for row in thread_pool::share(p, parts, rows) {
                let (source_at, flat) = w.row_start(row);
                // A last dimension of the source's own, contiguous (an embedding's rows): one
                // lookup and one copy for the whole row.
                let whole_row = w.index_strides[rank - 1] == 0 && w.source_strides[rank - 1] == 1;
                let step = if whole_row { last } else { 1 };
                for j in (0..last).step_by(step) {
                    let at = w.add_indices(source_at + j * w.source_strides[rank - 1], flat + j * w.index_strides[rank - 1]);
                    if let Err((k, v)) = at {
                        if bad_k.compare_exchange(0, k as i64 + 1, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                            bad_v.store(v, Ordering::Relaxed);
                        }
                    }
                    let to = (self.out + (row * last + j) * self.item) as *mut u8;
                    let bytes = step * self.item;
                    // SAFETY: `new` checked the largest offset against the source; each part
                    // writes its own rows of the output.
                    unsafe {
                        match at {
                            Ok(at) => std::ptr::copy_nonoverlapping((self.source + at * self.item) as *const u8, to, bytes),
                            Err(_) => std::ptr::write_bytes(to, 0, bytes),
                        }
                    }
                }
            }
        });
        // Reported from the stream's thread (the parts run on the pool's).
        let k = bad_k.load(Ordering::Relaxed);
        if k > 0 {
            rt::fail_task(rt::FailureClass::Index, w.out_of_bounds(((k - 1) as usize, bad_v.load(Ordering::Relaxed))));
        }
    }
}

// ANCHOR: launch_index_write
/// Launches `target[indices...] = values` (`+=` for `Accumulate` and `IndexAdd`) for
/// contiguous `values` in the result's order, of the target's dtype; the target may have any
/// strides that do not overlap. False for a dtype it has no arithmetic for (bool and complex
/// accumulation). Writes to one element land in the result's order, so of two assignments
/// the later stays and sums are CPU's, whatever the number of threads: the threads split the
/// last dimension, which the indices do not address.
pub(crate) fn launch_index_write(op: IndexWrite, target: Dense, values: Dense, item: usize, layout: &IndexLayout, indices: &[Dense], device: i64) -> Result<bool> {
    let arithmetic = match op {
        IndexWrite::Assign => Some(Add::None),
        _ => match (target.dtype, Dtype::from_code(target.dtype), Int::from_code(target.dtype)) {
            (6, _, _) => Some(Add::F32),
            (7, _, _) => Some(Add::F64),
            (_, Some(d), _) => Some(Add::Rounded(d)),
            (_, None, Some(t)) if t != Int::Bool => Some(Add::Int(t)),
            _ => None,
        },
    };
    let Some(add) = arithmetic else { return Ok(false) };
    let name = if op == IndexWrite::IndexAdd { "index_add_" } else { "index_put_" };
    let (walk, numel) = Walk::new(name, layout, indices, target.numel)?;
    if values.numel != numel || values.dtype != target.dtype || item == 0 {
        return Err(rt::Error::InvalidValue(format!("{name}: {} values for {numel} elements", values.numel)).into());
    }
    if numel == 0 {
        return Ok(true);
    }
    let work = Writing {
        target: view(target.data, target.numel * item, &[target.storage, target.storage_len])?,
        values: view(values.data, values.numel * item, &[values.storage, values.storage_len])?,
        item,
        add,
        op,
        walk,
    };
    launch(device, numel, move || work.run())?;
    Ok(true)
}

/// How a value meets the element it lands on.
#[derive(Clone, Copy)]
enum Add {
    /// Replaces it.
    None,
    F32,
    F64,
    /// float16 and bfloat16: added in float32, rounded once, as CPU's `Half` arithmetic.
    Rounded(Dtype),
    /// Integers wrap, as in C++.
    Int(Int),
}

/// One launched write: the runtime's views and the walk, in elements.
#[derive(Clone)]
pub(crate) struct Writing {
    target: usize,
    values: usize,
    item: usize,
    add: Add,
    op: IndexWrite,
    walk: Walk,
}

impl Writing {
    pub(crate) fn run(&self) {
        let w = &self.walk;
        if let Some(bad) = w.first_bad_index() {
            // CPU's messages: index_add_ checks its index as a whole.
            let text = if self.op == IndexWrite::IndexAdd { "index out of range in self".into() } else { w.out_of_bounds(bad) };
            rt::fail_task(rt::FailureClass::Index, text);
            return;
        }
        let rank = w.shape.len();
        let (last, rows) = (w.shape[rank - 1], w.shape[..rank - 1].iter().product::<usize>());
        // Columns of the last dimension are distinct elements of the target when that
        // dimension is the target's own (its stride is not 0 and the target does not overlap
        // itself): threads may take disjoint columns. Otherwise one thread keeps the order.
        let own_column = w.index_strides[rank - 1] == 0 && w.source_strides[rank - 1] > 0;
        let parts = if own_column { thread_pool::threads().min((rows * last).div_ceil(1 << 14)).min(last).max(1) } else { 1 };
        thread_pool::run(parts, |p| {
            let columns = thread_pool::share(p, parts, last);
            for row in 0..rows {
                let (target_at, flat) = w.row_start(row);
                for j in columns.clone() {
                    let Ok(at) = w.add_indices(target_at + j * w.source_strides[rank - 1], flat + j * w.index_strides[rank - 1]) else {
                        continue; // checked above
                    };
                    let (to, from) = ((self.target + at * self.item) as *mut u8, (self.values + (row * last + j) * self.item) as *const u8);
                    // SAFETY: `new` checked every offset against the target and the values'
                    // count; parts write disjoint columns.
                    unsafe { self.add.apply(to, from, self.item) };
                }
            }
        });
    }
}

impl Add {
    /// # Safety
    /// `to` and `from` point to one element each of the dtype this was chosen for.
    unsafe fn apply(self, to: *mut u8, from: *const u8, item: usize) {
        unsafe {
            match self {
                Add::None => std::ptr::copy_nonoverlapping(from, to, item),
                Add::F32 => (to as *mut f32).write_unaligned((to as *const f32).read_unaligned() + (from as *const f32).read_unaligned()),
                Add::F64 => (to as *mut f64).write_unaligned((to as *const f64).read_unaligned() + (from as *const f64).read_unaligned()),
                Add::Rounded(d) => {
                    let (mut old, mut v) = ([0f32], [0f32]);
                    dtype::load(d, to, item as isize, &mut old);
                    dtype::load(d, from, item as isize, &mut v);
                    dtype::store(d, to, item as isize, &[old[0] + v[0]]);
                }
                Add::Int(t) => t.write(to, t.read(to).wrapping_add(t.read(from))),
            }
        }
    }
}
// ANCHOR_END: launch_index_write
