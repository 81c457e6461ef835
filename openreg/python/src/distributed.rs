//! The Python face of OCCL (the runtime's `comm` module) for `torch_openreg.openreg.distributed`:
//! connecting a communicator and queueing collectives on a stream. Everything PyTorch-shaped
//! (tensors, ReduceOp, Work, futures) stays in Python; here there are addresses and names.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use openreg_runtime as rt;
use rt::comm::{Buf, Communicator, DataType, Listener, Op, ReduceOp};

/// A tensor's bytes as Python passes them: `(data_ptr, nbytes, storage_ptr, storage_nbytes)`.
type TensorArg = (u64, u64, u64, u64);

/// `torch.distributed.DistBackendError`, the exception c10d backends raise for failures.
fn backend_error(py: Python<'_>, message: String) -> PyErr {
    let error = py.import("torch.distributed").and_then(|m| m.getattr("DistBackendError")?.call1((message.clone(),)));
    match error {
        Ok(value) => PyErr::from_value(value),
        Err(_) => PyRuntimeError::new_err(message),
    }
}

/// The runtime's read/write view of a device tensor's bytes.
fn buffer((ptr, len, base, base_len): TensorArg) -> PyResult<Buf> {
    if rt::device_of(base as *const u8).is_none() && base_len > 0 {
        return Err(PyValueError::new_err(format!(
            "occl: the buffer at {ptr:#x} is not openreg device memory (occl moves openreg tensors only)"
        )));
    }
    if len == 0 {
        return Ok(Buf { ptr: ptr as *mut u8, len: 0 });
    }
    let view = rt::host_view_within(ptr as *const u8, len as usize, base as *const u8, base_len as usize)
        .map_err(|e| PyValueError::new_err(format!("occl: {e}")))?;
    Ok(Buf { ptr: view, len: len as usize })
}

fn dtype(name: &str) -> PyResult<DataType> {
    DataType::parse(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "occl: unsupported dtype torch.{name}; expected one of float32, float64, float16, bfloat16, \
             int64, int32, int16, int8, uint8, bool"
        ))
    })
}

fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    ReduceOp::parse(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "occl: unsupported reduce op ReduceOp.{name}; expected one of SUM, AVG, PRODUCT, MIN, MAX"
        ))
    })
}

/// A bound listening socket; `connect` consumes it.
#[pyclass(name = "OcclListener")]
pub struct PyListener(Option<Listener>);

#[pymethods]
impl PyListener {
    #[new]
    fn new() -> PyResult<Self> {
        Listener::bind().map(|l| PyListener(Some(l))).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    #[getter]
    fn port(&self) -> u16 {
        self.0.as_ref().map_or(0, Listener::port)
    }
}

// ANCHOR: work
/// One queued operation; `wait` blocks (without the GIL) until it ran.
#[pyclass(name = "OcclWork", frozen)]
pub struct PyWork(Arc<rt::comm::Work>);

#[pymethods]
impl PyWork {
    /// Waits at most `timeout` seconds (forever if None); raises DistBackendError if the
    /// operation failed or did not complete in time.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let work = self.0.clone();
        let outcome = py.detach(move || work.wait(timeout.map(Duration::from_secs_f64)));
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(message)) => Err(backend_error(py, message)),
            None => Err(backend_error(
                py,
                format!(
                    "occl {} #{} did not complete within {:.1} s",
                    self.0.name,
                    self.0.seq,
                    timeout.unwrap_or_default()
                ),
            )),
        }
    }

    /// Waits at most `timeout` seconds; true if it completed (successfully or not).
    fn completed_within(&self, py: Python<'_>, timeout: f64) -> bool {
        let work = self.0.clone();
        py.detach(move || work.wait(Some(Duration::from_secs_f64(timeout.max(0.0)))).is_some())
    }

    fn is_completed(&self) -> bool {
        self.0.poll().is_some()
    }

    /// The failure's message once it completed with one, else None.
    fn exception(&self) -> Option<String> {
        self.0.poll().and_then(Result::err)
    }
}
// ANCHOR_END: work

/// A communicator: this process's rank in a group, connected to the others.
#[pyclass(name = "OcclCommunicator", frozen)]
pub struct PyCommunicator(Arc<Communicator>);

impl PyCommunicator {
    fn launch(&self, py: Python<'_>, stream: (i64, u64), op: Op) -> PyResult<PyWork> {
        let stream = rt::stream_by_id(stream.0, stream.1).map_err(|e| PyValueError::new_err(e.to_string()))?;
        match self.0.launch(&stream, op) {
            Ok(work) => Ok(PyWork(work)),
            // A failed communicator is a backend failure; anything else is a bad argument.
            Err(e) if self.0.failure().is_some() => Err(backend_error(py, e.to_string())),
            Err(e) => Err(PyValueError::new_err(e.to_string())),
        }
    }
}

#[pymethods]
impl PyCommunicator {
    // ANCHOR: connect
    /// Connects `rank` of `size` to the others at `addresses` (`host:port` per rank, this
    /// rank's included); receives give up after `timeout` seconds; peers on this host share
    /// memory if `shared_memory`.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        listener: &mut PyListener,
        rank: usize,
        size: usize,
        addresses: Vec<String>,
        timeout: f64,
        shared_memory: bool,
    ) -> PyResult<Self> {
        let listener = listener.0.take().ok_or_else(|| PyValueError::new_err("occl: this listener was already used"))?;
        let timeout = Duration::from_secs_f64(timeout.max(0.001));
        py.detach(move || Communicator::connect(listener, rank, size, &addresses, timeout, shared_memory))
            .map(PyCommunicator)
            .map_err(|e| backend_error(py, e.to_string()))
    }
    // ANCHOR_END: connect

    #[getter]
    fn rank(&self) -> usize {
        self.0.rank()
    }

    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }

    /// How this rank reaches each rank: "shm", "tcp" or "self".
    #[getter]
    fn transports(&self) -> Vec<&'static str> {
        self.0.transports()
    }

    /// Closes the connections; peers waiting for this rank fail with `why`.
    fn abort(&self, py: Python<'_>, why: String) {
        let comm = self.0.clone();
        py.detach(move || comm.abort(&why));
    }

    // ANCHOR: all_reduce
    fn all_reduce(&self, py: Python<'_>, stream: (i64, u64), tensor: TensorArg, dtype: &str, op: &str) -> PyResult<PyWork> {
        let op = Op::AllReduce { buf: buffer(tensor)?, dtype: self::dtype(dtype)?, op: reduce_op(op)? };
        self.launch(py, stream, op)
    }
    // ANCHOR_END: all_reduce

    fn broadcast(&self, py: Python<'_>, stream: (i64, u64), tensor: TensorArg, dtype: &str, root: usize) -> PyResult<PyWork> {
        let op = Op::Broadcast { buf: buffer(tensor)?, dtype: self::dtype(dtype)?, root };
        self.launch(py, stream, op)
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce(&self, py: Python<'_>, stream: (i64, u64), tensor: TensorArg, dtype: &str, op: &str, root: usize) -> PyResult<PyWork> {
        let op = Op::Reduce { buf: buffer(tensor)?, dtype: self::dtype(dtype)?, op: reduce_op(op)?, root };
        self.launch(py, stream, op)
    }

    fn all_gather(&self, py: Python<'_>, stream: (i64, u64), input: TensorArg, output: TensorArg, dtype: &str) -> PyResult<PyWork> {
        let op = Op::AllGather { input: buffer(input)?, output: buffer(output)?, dtype: self::dtype(dtype)? };
        self.launch(py, stream, op)
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter(&self, py: Python<'_>, stream: (i64, u64), input: TensorArg, output: TensorArg, dtype: &str, op: &str) -> PyResult<PyWork> {
        let op = Op::ReduceScatter { input: buffer(input)?, output: buffer(output)?, dtype: self::dtype(dtype)?, op: reduce_op(op)? };
        self.launch(py, stream, op)
    }

    /// Splits in bytes, one per rank.
    #[allow(clippy::too_many_arguments)]
    fn all_to_all(
        &self,
        py: Python<'_>,
        stream: (i64, u64),
        input: TensorArg,
        input_splits: Vec<usize>,
        output: TensorArg,
        output_splits: Vec<usize>,
        dtype: &str,
    ) -> PyResult<PyWork> {
        let op = Op::AllToAll { input: buffer(input)?, input_splits, output: buffer(output)?, output_splits, dtype: self::dtype(dtype)? };
        self.launch(py, stream, op)
    }

    #[pyo3(signature = (stream, input, output, dtype, root))]
    fn gather(&self, py: Python<'_>, stream: (i64, u64), input: TensorArg, output: Option<TensorArg>, dtype: &str, root: usize) -> PyResult<PyWork> {
        let op = Op::Gather { input: buffer(input)?, output: output.map(buffer).transpose()?, dtype: self::dtype(dtype)?, root };
        self.launch(py, stream, op)
    }

    #[pyo3(signature = (stream, input, output, dtype, root))]
    fn scatter(&self, py: Python<'_>, stream: (i64, u64), input: Option<TensorArg>, output: TensorArg, dtype: &str, root: usize) -> PyResult<PyWork> {
        let op = Op::Scatter { input: input.map(buffer).transpose()?, output: buffer(output)?, dtype: self::dtype(dtype)?, root };
        self.launch(py, stream, op)
    }

    fn send(&self, py: Python<'_>, stream: (i64, u64), tensor: TensorArg, dtype: &str, peer: usize) -> PyResult<PyWork> {
        let op = Op::Send { buf: buffer(tensor)?, dtype: self::dtype(dtype)?, peer };
        self.launch(py, stream, op)
    }

    fn recv(&self, py: Python<'_>, stream: (i64, u64), tensor: TensorArg, dtype: &str, peer: usize) -> PyResult<PyWork> {
        let op = Op::Recv { buf: buffer(tensor)?, dtype: self::dtype(dtype)?, peer };
        self.launch(py, stream, op)
    }

    fn barrier(&self, py: Python<'_>, stream: (i64, u64)) -> PyResult<PyWork> {
        self.launch(py, stream, Op::Barrier)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyListener>()?;
    m.add_class::<PyCommunicator>()?;
    m.add_class::<PyWork>()?;
    Ok(())
}
