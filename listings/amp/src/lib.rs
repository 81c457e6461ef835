//! `torch_openreg._C`: registers the backend at import and exposes device management.
#![allow(non_snake_case)] // the module must be called `_C`

use pyo3::exceptions::{PyImportError, PyRuntimeError};
use pyo3::prelude::*;

mod allocator;
mod copy;
mod device;
mod event;
mod fallback;
mod ffi;
mod kernels;
mod memory;
mod stream;

#[pyfunction]
fn _get_device_count() -> i8 {
    device::DEVICE_COUNT
}

#[pyfunction]
fn _get_device() -> i8 {
    device::current_device()
}

/// Sets the current device and returns the previous one; negative indices are a no-op.
#[pyfunction]
#[pyo3(name = "_exchangeDevice")]
fn exchange_device(device: i64) -> PyResult<i64> {
    if device < 0 {
        return Ok(-1);
    }
    device::exchange_device(device).map(i64::from).map_err(PyRuntimeError::new_err)
}

/// The default `torch.Generator` of `device`, through PyTorch's accelerator API.
#[pyfunction]
fn _get_default_generator<'py>(py: Python<'py>, device: i64) -> PyResult<Bound<'py, PyAny>> {
    device::check_device(device).map_err(PyRuntimeError::new_err)?;
    py.import("torch")?.getattr("_C")?.call_method1("_accelerator_getDefaultGenerator", (device,))
}

/// The operators that ran on the CPU through the fallback, with how often.
#[pyfunction]
fn _fallback_counts() -> Vec<(String, u64)> {
    fallback::fallback_counts()
}

#[pyfunction]
fn _reset_fallback_counts() {
    fallback::reset_fallback_counts()
}

/// Test work for the current stream of `device`: it sleeps for `ms` milliseconds, like
/// `torch.cuda._sleep`, so that a test can see work still running.
#[pyfunction]
fn _sleep(device: i64, ms: u64) -> PyResult<()> {
    let device = device::check_device(device).map_err(PyRuntimeError::new_err)?;
    stream::launch_current(device, Box::new(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Ok(())
    }))
    .map_err(PyRuntimeError::new_err)
}

#[pymodule]
#[pyo3(name = "_C")]
fn openreg_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    ffi::ffi::register_backend().map_err(|e| PyImportError::new_err(e.what().to_string()))?;
    m.add_function(wrap_pyfunction!(_get_device_count, m)?)?;
    m.add_function(wrap_pyfunction!(_get_device, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_device, m)?)?;
    m.add_function(wrap_pyfunction!(_fallback_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_reset_fallback_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_get_default_generator, m)?)?;
    m.add_function(wrap_pyfunction!(_sleep, m)?)?;
    Ok(())
}
