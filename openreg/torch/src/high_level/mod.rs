//! High-level modules: what PyTorch's C++ `c10d::Backend` (distributed) needs from the runtime.

pub(crate) mod distributed;
