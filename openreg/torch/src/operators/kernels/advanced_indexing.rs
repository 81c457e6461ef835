//! Advanced indexing on the device: `x[i0, i1, ...]` with integer index tensors, the index
//! values read by the kernel, on the stream, as a GPU reads them. The result's shape follows
//! from the shapes alone, so nothing waits for the device; an index out of range is reported
//! the way a GPU reports a device-side assert, as an error of the stream at its next
//! synchronize (`IndexError`, with CPU's message), and its element is left zero.

use std::sync::atomic::{AtomicI64, Ordering};

use openreg_runtime as rt;

use super::dtype::INT64;
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, IndexLayout};

/// Launches `out = source[indices...]` for contiguous `source` and `out` of `item`-byte
/// elements and int64 index tensors of one (broadcast) shape, contiguous. Result dimension `r`
/// has size `shape[r]` and moves `source_strides[r]` elements in the source (0 for a broadcast
/// index dimension) and `index_strides[r]` in the index tensors (0 for a dimension of the
/// source). Index tensor `k` indexes source dimension `dims[k]`.
pub(crate) fn launch_index(source: Dense, out: Dense, item: usize, layout: &IndexLayout, indices: &[Dense], device: i64) -> Result<()> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("index: {what}")));
    let l = layout;
    let rank = l.shape.len();
    if l.source_strides.len() != rank || l.index_strides.len() != rank {
        return Err(invalid(format!("{rank} dimensions with {} and {} strides", l.source_strides.len(), l.index_strides.len())));
    }
    if indices.is_empty() || [l.dims.len(), l.dim_sizes.len(), l.dim_strides.len()].iter().any(|&n| n != indices.len()) {
        return Err(invalid(format!("{} index tensors for {} dimensions", indices.len(), l.dims.len())));
    }
    let count = |v: &[i64]| v.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
    let Some(numel) = count(&l.shape) else { return Err(invalid(format!("shape {:?}", l.shape))) };
    // The broadcast index shape's element count: the largest flat position plus one.
    let index_numel = if numel == 0 { 0 } else { 1 + l.shape.iter().zip(&l.index_strides).map(|(&s, &t)| (s - 1) * t).sum::<i64>() as usize };
    if out.numel != numel || source.dtype != out.dtype || item == 0 {
        return Err(invalid(format!("an output of {} elements for {numel}", out.numel)));
    }
    if indices.iter().any(|t| t.dtype != INT64 || t.numel != index_numel) {
        return Err(invalid(format!("int64 index tensors of {index_numel} elements expected")));
    }
    if l.dim_sizes.iter().any(|&s| s < 0) || l.source_strides.iter().chain(&l.index_strides).chain(&l.dim_strides).any(|&s| s < 0) {
        return Err(invalid("negative sizes or strides".into()));
    }
    // Every offset the kernel can compute lies in the source: checked once, here.
    let reach = l.shape.iter().zip(&l.source_strides).map(|(&s, &t)| (s - 1).max(0) * t).sum::<i64>()
        + l.dim_sizes.iter().zip(&l.dim_strides).map(|(&s, &t)| (s - 1).max(0) * t).sum::<i64>();
    if numel > 0 && reach as usize >= source.numel {
        return Err(invalid(format!("offsets up to {reach} in a source of {} elements", source.numel)));
    }
    if numel == 0 {
        return Ok(());
    }
    let work = Indexing {
        source: view(source.data, source.numel * item, &[source.storage, source.storage_len])?,
        out: view(out.data, out.numel * item, &[out.storage, out.storage_len])?,
        item,
        shape: l.shape.iter().map(|&v| v as usize).collect(),
        source_strides: l.source_strides.iter().map(|&v| v as usize).collect(),
        index_strides: l.index_strides.iter().map(|&v| v as usize).collect(),
        indices: indices.iter().map(|t| view(t.data, t.numel * 8, &[t.storage, t.storage_len])).collect::<Result<_>>()?,
        dims: l.dims.clone(),
        dim_sizes: l.dim_sizes.clone(),
        dim_strides: l.dim_strides.iter().map(|&v| v as usize).collect(),
    };
    launch(device, numel, move || work.run())
}

/// One launched indexing: the runtime's views and the layout, in elements.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Indexing {
    source: usize,
    out: usize,
    item: usize,
    shape: Vec<usize>,
    source_strides: Vec<usize>,
    index_strides: Vec<usize>,
    indices: Vec<usize>,
    dims: Vec<i64>,
    dim_sizes: Vec<i64>,
    dim_strides: Vec<usize>,
}

impl Indexing {
    pub(crate) fn run(&self) {
        // The last dimension is walked as a run: one row of the result at a time.
        let rank = self.shape.len();
        let (last, rows) = (self.shape[rank - 1], self.shape[..rank - 1].iter().product::<usize>());
        let parts = thread_pool::threads().min((rows * last).div_ceil(1 << 14)).min(rows).max(1);
        // The first bad index seen: (k, value), k + 1 stored so that 0 means none.
        let (bad_k, bad_v) = (AtomicI64::new(0), AtomicI64::new(0));
        thread_pool::run(parts, |p| {
            let mut position = vec![0usize; rank];
            for row in thread_pool::share(p, parts, rows) {
                let mut rest = row;
                for r in (0..rank - 1).rev() {
                    position[r] = rest % self.shape[r];
                    rest /= self.shape[r];
                }
                let (mut source_at, mut flat) = (0usize, 0usize);
                for r in 0..rank - 1 {
                    source_at += position[r] * self.source_strides[r];
                    flat += position[r] * self.index_strides[r];
                }
                // A last dimension of the source's own, contiguous (an embedding's rows): one
                // lookup and one copy for the whole row.
                let whole_row = self.index_strides[rank - 1] == 0 && self.source_strides[rank - 1] == 1;
                let step = if whole_row { last } else { 1 };
                for j in (0..last).step_by(step) {
                    let flat = flat + j * self.index_strides[rank - 1];
                    let mut at = source_at + j * self.source_strides[rank - 1];
                    let mut inside = true;
                    for (k, &index) in self.indices.iter().enumerate() {
                        // SAFETY: the launch checked every index tensor's elements.
                        let v = unsafe { *(index as *const i64).add(flat) };
                        let size = self.dim_sizes[k];
                        if v < -size || v >= size {
                            if bad_k.compare_exchange(0, k as i64 + 1, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                                bad_v.store(v, Ordering::Relaxed);
                            }
                            inside = false;
                            break;
                        }
                        at += (if v < 0 { v + size } else { v }) as usize * self.dim_strides[k];
                    }
                    let to = (self.out + (row * last + j) * self.item) as *mut u8;
                    let bytes = step * self.item;
                    // SAFETY: the launch checked the largest offset against the source; each
                    // part writes its own rows of the output.
                    unsafe {
                        if inside {
                            std::ptr::copy_nonoverlapping((self.source + at * self.item) as *const u8, to, bytes);
                        } else {
                            std::ptr::write_bytes(to, 0, bytes);
                        }
                    }
                }
            }
        });
        // Reported from the stream's thread (the parts run on the pool's).
        let k = bad_k.load(Ordering::Relaxed);
        if k > 0 {
            let k = (k - 1) as usize;
            let text = format!("index {} is out of bounds for dimension {} with size {}", bad_v.load(Ordering::Relaxed), self.dims[k], self.dim_sizes[k]);
            rt::fail_task(rt::FailureClass::Index, text);
        }
    }
}
