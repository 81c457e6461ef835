//! The OpenReg device runtime: the "driver" of a simulated accelerator whose memory is host
//! memory that host code cannot touch. It knows nothing about PyTorch; the `openreg-torch`
//! crate adapts it to PyTorch's C++ interfaces.
//!
//! The modules form layers, listed here bottom up: each uses only those above it in this table
//! (`tests/layers.rs` checks it). Streams define the interfaces that capture and tracing plug
//! into, so neither is woven into them.
//!
//! | concept | module |
//! |---|---|
//! | errors | [`error`] |
//! | devices, current device per thread | [`device`] |
//! | fork safety | [`fork`] |
//! | device memory (separate address space) | [`memory`] |
//! | pinned host memory | [`host`] |
//! | pointer attributes | [`pointer`] |
//! | streams and kernel launch; the hooks for capture, tracing and waits | [`stream`] |
//! | copies | [`copy`] |
//! | events | [`event`] |
//! | capture and replay (a launch sink and a wait check) | [`graph`] |
//! | annotations for profilers (a stream observer) | [`trace`] |
//! | collective communication between processes | [`comm`] |

pub mod comm;
pub mod copy;
pub mod device;
pub mod error;
pub mod event;
mod fault;
pub mod fork;
pub mod graph;
pub mod host;
pub mod memory;
pub mod pointer;
pub mod stream;
pub mod trace;

pub use copy::{MemcpyKind, memcpy, memcpy_async};
pub use device::{DEVICE_COUNT, check_device, current_device, device_count, exchange_device, set_device};
pub use error::{Error, FailureClass, Result};
pub use event::Event;
pub use fork::is_in_bad_fork;
pub use graph::{CaptureMode, Graph, ReplayPrologue};
pub use host::{host_free, host_malloc};
pub use memory::{device_of, free, host_view, host_view_within, malloc, memory_info, trim};
pub use pointer::{MemoryType, PointerAttributes, pointer_attributes};
pub use stream::{
    Stream, current_stream, default_stream, fail_task, new_stream, set_current_stream,
    stream_by_id, synchronize_device,
};
