//! High-level modules: what PyTorch's C++ `c10d::Backend` (distributed) needs from the runtime,
//! Inductor's compiled kernels, and AOTInductor's packaged models.

pub mod aoti;
pub mod compiled;
pub(crate) mod distributed;
