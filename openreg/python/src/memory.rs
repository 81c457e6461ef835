//! `torch.openreg.memory`'s history and snapshots, and `torch.openreg.MemPool`: the
//! allocator's data (openreg_torch::memory) as the dictionaries CUDA's functions return.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use openreg_torch::memory::{self, Level};

fn value_error(message: String) -> PyErr {
    PyValueError::new_err(message)
}

/// `enabled` is None/"state"/"all", `context` None/"state"/"alloc"/"all", `stacks`
/// "python"/"all" (checked in Python, which names the bad value).
#[pyfunction]
#[pyo3(signature = (enabled, context, stacks, max_entries, clear_history))]
fn _record_memory_history(
    enabled: Option<&str>,
    context: Option<&str>,
    stacks: &str,
    max_entries: usize,
    clear_history: bool,
) -> PyResult<()> {
    let level = |name: Option<&str>| match name {
        None => Ok(Level::Off),
        Some("state") => Ok(Level::State),
        Some("alloc") => Ok(Level::Alloc),
        Some("all") => Ok(Level::All),
        Some(other) => Err(value_error(format!("unknown recording level {other:?}"))),
    };
    memory::record_memory_history(level(enabled)?, level(context)?, stacks == "all", max_entries, clear_history);
    Ok(())
}

// ANCHOR: snapshot_dict
/// The snapshot in the format of `torch.cuda.memory._snapshot()`: `segments` (with their
/// `blocks`) and `device_traces`, one list per device. Frames are shared lists, as CUDA's are.
#[pyfunction]
#[pyo3(signature = (pool=None))]
fn _memory_snapshot<'py>(py: Python<'py>, pool: Option<u64>) -> PyResult<Bound<'py, PyDict>> {
    let snapshot = py.detach(|| memory::snapshot(pool)).map_err(value_error)?;
    let mut tracebacks = Vec::with_capacity(snapshot.tracebacks.len());
    for frames in &snapshot.tracebacks {
        let list = PyList::empty(py);
        for f in frames {
            let frame = PyDict::new(py);
            frame.set_item("name", &f.name)?;
            frame.set_item("filename", &f.filename)?;
            frame.set_item("line", f.line)?;
            list.append(frame)?;
        }
        tracebacks.push(list);
    }
    let frames = |index: Option<usize>| -> Bound<'py, PyList> {
        index.map_or_else(|| PyList::empty(py), |i| tracebacks[i].clone())
    };
    let segments = PyList::empty(py);
    for s in &snapshot.segments {
        let blocks = PyList::empty(py);
        let (mut allocated, mut active, mut requested) = (0, 0, 0);
        for b in &s.blocks {
            let block = PyDict::new(py);
            block.set_item("address", b.address)?;
            block.set_item("size", b.size)?;
            block.set_item("requested_size", b.requested_size)?;
            block.set_item("state", b.state)?;
            block.set_item("frames", frames(b.frames))?;
            blocks.append(block)?;
            if b.state == "active_allocated" {
                allocated += b.size;
                requested += b.requested_size;
            }
            if b.state != "inactive" {
                active += b.size;
            }
        }
        let segment = PyDict::new(py);
        segment.set_item("device", s.device)?;
        segment.set_item("address", s.address)?;
        segment.set_item("total_size", s.total_size)?;
        segment.set_item("allocated_size", allocated)?;
        segment.set_item("active_size", active)?;
        segment.set_item("requested_size", requested)?;
        segment.set_item("stream", s.stream)?;
        segment.set_item("segment_type", if s.small { "small" } else { "large" })?;
        segment.set_item("segment_pool_id", (0u64, s.pool))?;
        segment.set_item("is_expandable", false)?;
        segment.set_item("frames", frames(s.frames))?;
        segment.set_item("blocks", blocks)?;
        segments.append(segment)?;
    }
    let device_traces = PyList::empty(py);
    for trace in &snapshot.traces {
        let entries = PyList::empty(py);
        for e in trace {
            let entry = PyDict::new(py);
            entry.set_item("action", e.action)?;
            entry.set_item("addr", e.addr)?;
            entry.set_item("size", e.size)?;
            entry.set_item("stream", e.stream)?;
            entry.set_item("time_us", e.time_us)?;
            entry.set_item("frames", frames(e.frames))?;
            entry.set_item("pool_id", (0u64, e.pool))?;
            if e.action == "oom" {
                entry.set_item("device_free", e.device_free)?;
            }
            entries.append(entry)?;
        }
        device_traces.append(entries)?;
    }
    let result = PyDict::new(py);
    result.set_item("segments", segments)?;
    result.set_item("device_traces", device_traces)?;
    Ok(result)
}
// ANCHOR_END: snapshot_dict

#[pyfunction]
fn _mem_pool_create(device: i64) -> PyResult<u64> {
    memory::mem_pool_create(device).map_err(value_error)
}

#[pyfunction]
fn _mem_pool_release(pool: u64) {
    memory::mem_pool_release(pool)
}

/// (device, references) of a live pool.
#[pyfunction]
fn _mem_pool_info(pool: u64) -> PyResult<(usize, usize)> {
    memory::mem_pool_info(pool).map_err(value_error)
}

#[pyfunction]
fn _mem_pool_stats<'py>(py: Python<'py>, pool: u64) -> PyResult<Bound<'py, PyDict>> {
    let s = memory::mem_pool_stats(pool).map_err(value_error)?;
    let stats = PyDict::new(py);
    stats.set_item("segments", s.segments)?;
    stats.set_item("reserved_bytes", s.reserved_bytes)?;
    stats.set_item("allocated_blocks", s.allocated_blocks)?;
    stats.set_item("allocated_bytes", s.allocated_bytes)?;
    stats.set_item("requested_bytes", s.requested_bytes)?;
    Ok(stats)
}

#[pyfunction]
fn _begin_allocate_to_pool(device: i64, pool: u64) -> PyResult<()> {
    memory::begin_allocate_to_pool(device, pool).map_err(value_error)
}

#[pyfunction]
fn _end_allocate_to_pool(device: i64, pool: u64) -> PyResult<()> {
    memory::end_allocate_to_pool(device, pool).map_err(value_error)
}

pub(crate) fn add_functions(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_record_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(_memory_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(_mem_pool_create, m)?)?;
    m.add_function(wrap_pyfunction!(_mem_pool_release, m)?)?;
    m.add_function(wrap_pyfunction!(_mem_pool_info, m)?)?;
    m.add_function(wrap_pyfunction!(_mem_pool_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_begin_allocate_to_pool, m)?)?;
    m.add_function(wrap_pyfunction!(_end_allocate_to_pool, m)?)?;
    Ok(())
}
