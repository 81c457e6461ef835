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
