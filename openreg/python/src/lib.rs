//! `torch_openreg._C`: the functions the Python package needs from Rust.
#![allow(non_snake_case)] // the module must be called `_C`
//!
//! Importing it registers the backend with PyTorch (allocator, guard, hooks, operators,
//! fallback). Device management goes straight to the runtime; everything PyTorch-shaped went
//! through the C++ glue at registration.

use pyo3::exceptions::{PyImportError, PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::intern;
use pyo3::types::{PyInt, PyTuple, PyType};

use openreg_runtime as rt;

mod memory;

use openreg_torch::compiled;
use openreg_torch::error::{ErrorKind, kind_of};

// ANCHOR: errors
/// A runtime error as the Python exception PyTorch would raise for it.
fn py_err(py: Python<'_>, error: rt::Error) -> PyErr {
    let message = error.to_string();
    let class = match kind_of(&error) {
        ErrorKind::Value => return PyValueError::new_err(message),
        ErrorKind::Index => return PyIndexError::new_err(message),
        ErrorKind::OutOfMemory => "OutOfMemoryError",
        _ => "AcceleratorError", // a RuntimeError subclass, as CUDA's errors are
    };
    match py.import("torch").and_then(|torch| torch.getattr(class)) {
        Ok(ty) => match ty.cast_into::<PyType>() {
            Ok(ty) => PyErr::from_type(ty, message),
            Err(_) => PyRuntimeError::new_err(message),
        },
        Err(_) => PyRuntimeError::new_err(message),
    }
}
// ANCHOR_END: errors

// ANCHOR: bind_distributed
unsafe extern "C" {
    /// csrc/ProcessGroupOCCLBinding.cpp: adds the pybind11 classes of the C++ c10d backend
    /// (`ProcessGroupOCCL`, `ProcessGroupOCCL.Options`) to the module; -1 with an error set.
    fn openreg_bind_distributed(module: *mut pyo3::ffi::PyObject) -> std::os::raw::c_int;
}

/// Binds the C++ c10d backend into this module. Called by `torch_openreg.openreg.distributed`
/// once `torch.distributed` is imported, whose `Backend` class the binding derives from.
#[pyfunction]
fn _bind_distributed(py: Python<'_>) -> PyResult<()> {
    let module = py.import("torch_openreg._C")?;
    if module.hasattr("ProcessGroupOCCL")? {
        return Ok(());
    }
    if unsafe { openreg_bind_distributed(module.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(())
}
// ANCHOR_END: bind_distributed

// ANCHOR: device_functions
#[pyfunction]
fn _get_device_count() -> usize {
    rt::device_count()
}

#[pyfunction]
fn _get_device() -> usize {
    rt::current_device()
}

/// Sets the current device; a negative index is a no-op, as in `torch.cuda.set_device`.
#[pyfunction]
fn _set_device(py: Python<'_>, device: i64) -> PyResult<()> {
    if device < 0 {
        return Ok(());
    }
    rt::set_device(device).map_err(|e| py_err(py, e))
}

/// Sets the current device and returns the previous one; a negative index is a no-op that
/// returns -1 (what `torch.openreg.device(None)` relies on).
#[pyfunction]
#[pyo3(name = "_exchangeDevice")]
fn exchange_device(py: Python<'_>, device: i64) -> PyResult<i64> {
    if device < 0 {
        return Ok(-1);
    }
    rt::exchange_device(device).map(|d| d as i64).map_err(|e| py_err(py, e))
}
// ANCHOR_END: device_functions

/// Waits for all work on `device` (its streams).
#[pyfunction]
fn _synchronize(py: Python<'_>, device: i64) -> PyResult<()> {
    py.detach(|| rt::synchronize_device(device)).map_err(|e| py_err(py, e))
}

/// Creates a stream directly in the runtime, outside PyTorch (as a library using the device
/// on its own would), and returns its id; `torch.openreg.ExternalStream` wraps it.
#[pyfunction]
fn _runtime_new_stream(py: Python<'_>, device: i64, priority: i32) -> PyResult<u64> {
    rt::new_stream(device, priority).map(|s| s.id()).map_err(|e| py_err(py, e))
}

/// Queues `ms` milliseconds of busy work on the current stream of the current device, like
/// `torch.cuda._sleep`: for tests and demonstrations of asynchrony.
#[pyfunction]
fn _sleep(py: Python<'_>, ms: u64) -> PyResult<()> {
    let stream = rt::current_stream(rt::current_device() as i64).map_err(|e| py_err(py, e))?;
    stream
        .launch(move || std::thread::sleep(std::time::Duration::from_millis(ms)))
        .map_err(|e| py_err(py, e))
}

/// How often each operator ran on the CPU instead of in an openreg kernel.
#[pyfunction]
fn _fallback_counts() -> Vec<(String, u64)> {
    openreg_torch::fallback_counts()
}

#[pyfunction]
fn _reset_fallback_counts() {
    openreg_torch::reset_fallback_counts()
}

/// The default `torch.Generator` of `device`.
#[pyfunction]
fn _get_default_generator<'py>(py: Python<'py>, device: i64) -> PyResult<Bound<'py, PyAny>> {
    rt::check_device(device).map_err(|e| py_err(py, e))?;
    py.import("torch")?
        .getattr("_C")?
        .call_method1("_accelerator_getDefaultGenerator", (device,))
}

// ANCHOR: launch_compiled
/// Queues a compiled kernel (Inductor's C++) on the current stream of its tensors' device.
/// `args` are the kernel's arguments as the generated wrapper passes them, tensors and
/// integers; the kernel gets `team` threads if its tensors hold at least `team_from_elements`
/// elements, else one. Reading the arguments here rather than in Python matters: a launch is
/// on every compiled call's path.
#[pyfunction]
fn _launch_compiled(
    py: Python<'_>,
    function: usize,
    args: &Bound<'_, PyTuple>,
    team: u64,
    team_from_elements: i64,
) -> PyResult<()> {
    let mut launch_args = Vec::with_capacity(args.len() + 1);
    let mut elements = 0i64;
    for arg in args.iter() {
        if arg.is_instance_of::<PyInt>() {
            launch_args.push(compiled::Arg::Value(arg.extract::<i64>()? as u64));
            continue;
        }
        let numel: i64 = arg.call_method0(intern!(py, "numel"))?.extract()?;
        let data: u64 = arg.call_method0(intern!(py, "data_ptr"))?.extract()?;
        elements += numel;
        launch_args.push(if numel == 0 {
            compiled::Arg::Value(data)
        } else {
            compiled::Arg::Tensor { data, storage: None }
        });
    }
    let threads = if elements >= team_from_elements { team } else { 1 };
    launch_args.push(compiled::Arg::Value(threads));
    compiled::launch(function, &launch_args).map_err(|e| match e {
        compiled::LaunchError::Argument(message) => PyRuntimeError::new_err(message),
        compiled::LaunchError::Runtime(error) => py_err(py, error),
    })
}
// ANCHOR_END: launch_compiled

/// Starts recording the runtime's profiler annotations (ranges and marks).
#[pyfunction]
fn _trace_start() {
    rt::trace::start();
}

/// Stops recording; the annotations as `(name, thread, start_ns, end_ns)`.
#[pyfunction]
fn _trace_stop() -> Vec<(String, u64, u64, u64)> {
    rt::trace::stop().into_iter().map(|a| (a.name, a.thread, a.start_ns, a.end_ns)).collect()
}

/// True in a child forked after the runtime was initialised (it refuses to work there).
#[pyfunction]
fn _is_in_bad_fork() -> bool {
    rt::is_in_bad_fork()
}

/// PyTorch's lazy device initialisation (the hooks' `init`), run once.
#[pyfunction]
fn _init() -> PyResult<()> {
    openreg_torch::lazy_init().map_err(PyRuntimeError::new_err)
}

// ANCHOR: module
#[pymodule]
#[pyo3(name = "_C")]
fn openreg_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // Refuse to register C++ glue compiled for another torch: its ABI may differ silently.
    let found: String = py.import("torch")?.getattr("__version__")?.extract()?;
    let release = found.split('+').next().unwrap_or(&found);
    if release != openreg_torch::TORCH_VERSION {
        return Err(PyImportError::new_err(format!(
            "torch_openreg was built against torch {} but torch {found} is installed; \
             rebuild torch_openreg (make build) or install torch=={}",
            openreg_torch::TORCH_VERSION,
            openreg_torch::TORCH_VERSION
        )));
    }
    openreg_torch::register()
        .map_err(|e| PyImportError::new_err(format!("registering the openreg backend failed: {e}")))?;

    m.add("_torch_version", openreg_torch::TORCH_VERSION)?;
    m.add_function(wrap_pyfunction!(_init, m)?)?;
    m.add_function(wrap_pyfunction!(_is_in_bad_fork, m)?)?;
    m.add_function(wrap_pyfunction!(_trace_start, m)?)?;
    m.add_function(wrap_pyfunction!(_launch_compiled, m)?)?;
    m.add_function(wrap_pyfunction!(_trace_stop, m)?)?;
    m.add_function(wrap_pyfunction!(_get_device_count, m)?)?;
    m.add_function(wrap_pyfunction!(_get_device, m)?)?;
    m.add_function(wrap_pyfunction!(_set_device, m)?)?;
    m.add_function(wrap_pyfunction!(exchange_device, m)?)?;
    m.add_function(wrap_pyfunction!(_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(_sleep, m)?)?;
    m.add_function(wrap_pyfunction!(_fallback_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_reset_fallback_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_runtime_new_stream, m)?)?;
    m.add_function(wrap_pyfunction!(_get_default_generator, m)?)?;
    m.add_function(wrap_pyfunction!(_bind_distributed, m)?)?;
    memory::add_functions(m)?;
    Ok(())
}
// ANCHOR_END: module
