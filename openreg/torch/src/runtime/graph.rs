//! Accelerator graphs for `at::GraphImplInterface` (`csrc/runtime/Graph.cpp`): capture on a
//! stream, replay, and a readable dump. The work is the runtime's (`openreg_runtime::graph`).

use openreg_runtime::{self as rt, CaptureMode};

use crate::error::Result;

/// A captured graph, owned by the C++ graph object.
pub(crate) struct Graph(rt::Graph);

fn stream(device: i64, id: i64) -> Result<rt::Stream> {
    Ok(rt::stream_by_id(device, id as u64)?)
}

/// `mode` is `at::GraphCaptureMode`: 0 default, 1 global, 2 thread-local, 3 relaxed. The
/// default is global, as for CUDA.
pub(crate) fn graph_capture_begin(device: i64, id: i64, pool: u64, mode: u8) -> Result<u64> {
    let mode = match mode {
        2 => CaptureMode::ThreadLocal,
        3 => CaptureMode::Relaxed,
        _ => CaptureMode::Global,
    };
    Ok(stream(device, id)?.begin_capture(pool, mode)?)
}

pub(crate) fn graph_capture_end(device: i64, id: i64) -> Result<Box<Graph>> {
    Ok(Box::new(Graph(stream(device, id)?.end_capture()?)))
}

/// Replays on the current stream of the graph's device.
pub(crate) fn graph_replay(graph: &Graph) -> Result<()> {
    let device = graph.0.stream().device() as i64;
    Ok(graph.0.replay(rt::current_stream(device)?)?)
}

pub(crate) fn graph_debug_dump(graph: &Graph, path: &str) -> Result<()> {
    std::fs::write(path, graph.0.describe())
        .map_err(|e| rt::Error::InvalidValue(format!("debug_dump: cannot write {path}: {e}")))?;
    Ok(())
}
