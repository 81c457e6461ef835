//! The Rust side of PyTorch's runtime interfaces (book part "Runtime"): the device allocator,
//! pinned host memory, copies, the current device, streams and events, profiler annotations. The C++ classes that
//! forward here are in `csrc/runtime/`.

pub(crate) mod allocator;
pub(crate) mod copy;
pub(crate) mod device;
pub(crate) mod generator;
pub(crate) mod graph;
pub(crate) mod host_allocator;
pub(crate) mod profiler;
pub(crate) mod stream;
