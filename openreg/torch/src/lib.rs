//! PyTorch integration of the OpenReg runtime.
//!
//! PyTorch's device interfaces are C++ classes, which Rust cannot subclass, so each one is a
//! short C++ class in `csrc/` whose methods forward to the Rust functions in this crate through
//! the cxx bridge in [`ffi`](crate::ffi). Both sides are split the same way, by the book's parts:
//! `runtime/` (allocators, device, streams), `operators/` (fallback, kernels), and
//! `high_level/` (autocast in C++ only; distributed's OCCL bridge). The Python module (`openreg/python`) calls
//! [`register`] once at import.

pub mod error;
mod ffi;
mod high_level;
mod operators;
mod runtime;

pub use high_level::compiled;
pub use operators::fallback::{fallback_counts, reset_fallback_counts};

/// The torch release the C++ glue was compiled against; the Python package checks it at import.
pub const TORCH_VERSION: &str = env!("OPENREG_TORCH_VERSION");

/// Registers the backend with PyTorch (idempotent). The error is the C++ exception's message.
pub fn register() -> Result<(), String> {
    ffi::ffi::register_backend().map_err(|e| e.what().to_string())
}

/// Runs PyTorch's lazy device initialisation for PrivateUse1 (the hooks' `init`).
pub fn lazy_init() -> Result<(), String> {
    ffi::ffi::lazy_init_device().map_err(|e| e.what().to_string())
}

/// The device allocator's tools for `torch_openreg._C`: memory history and snapshots
/// (`torch.openreg.memory`), memory pools (`torch.openreg.MemPool`). Errors are messages of
/// invalid arguments (Python's ValueError).
pub mod memory {
    use crate::runtime::allocator::{self, pools};

    pub use crate::runtime::allocator::PoolStats;
    pub use crate::runtime::allocator::history::{
        BlockInfo, Frame, Level, SegmentInfo, Snapshot, TraceInfo, record_memory_history,
    };

    pub fn snapshot(pool: Option<u64>) -> Result<Snapshot, String> {
        allocator::snapshot(pool).map_err(|e| e.to_string())
    }

    pub fn mem_pool_create(device: i64) -> Result<u64, String> {
        pools::mem_pool_create(device).map_err(|e| e.to_string())
    }

    pub fn mem_pool_release(pool: u64) {
        pools::mem_pool_release(pool)
    }

    /// The pool's device and how many references it has.
    pub fn mem_pool_info(pool: u64) -> Result<(usize, usize), String> {
        pools::mem_pool_info(pool).map_err(|e| e.to_string())
    }

    pub fn mem_pool_stats(pool: u64) -> Result<PoolStats, String> {
        allocator::pool_stats(pool).map_err(|e| e.to_string())
    }

    pub fn begin_allocate_to_pool(device: i64, pool: u64) -> Result<(), String> {
        pools::begin_allocate_to_pool(device, pool).map_err(|e| e.to_string())
    }

    pub fn end_allocate_to_pool(device: i64, pool: u64) -> Result<(), String> {
        pools::end_allocate_to_pool(device, pool).map_err(|e| e.to_string())
    }
}
