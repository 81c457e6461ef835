//! Kernels written in Rust, launched on the current stream of their device. A kernel
//! receives device addresses, checks and translates them to the runtime's view when it is
//! launched, and runs later on the stream's worker (or at once, when the stream is idle and
//! the work is small: a thread hop would cost more than the kernel).
//!
//! Each family's file holds its launcher (what `ffi.rs` calls: checks, then a launch) beside
//! its kernel. This file keeps what every launcher shares: the launch on the current stream
//! and the checked translation of device addresses.

pub(crate) mod advanced_indexing;
pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod convert;
pub(crate) mod ctc;
pub(crate) mod deform_conv;
pub(crate) mod depthwise_conv;
pub(crate) mod dropout;
pub(crate) mod dtype;
pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod factory;
pub(crate) mod foreach;
pub(crate) mod grouped_matmul;
pub(crate) mod histogram;
pub(crate) mod indexing;
pub(crate) mod integer;
pub(crate) mod linalg;
pub(crate) mod losses;
pub(crate) mod lstm;
pub(crate) mod margin;
pub(crate) mod math;
pub(crate) mod matmul;
pub(crate) mod nll_loss;
pub(crate) mod nms;
pub(crate) mod nonzero;
pub(crate) mod norm;
pub(crate) mod optim;
pub(crate) mod philox;
pub(crate) mod pooling;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rnn;
pub(crate) mod roi;
pub(crate) mod rows;
pub(crate) mod softmax;
pub(crate) mod sort;
pub(crate) mod thread_pool;
pub(crate) mod triangle;
pub(crate) mod upsample;
pub(crate) mod walk;

use openreg_runtime as rt;

use crate::error::{Failure, Result};
use crate::ffi::ffi::Dense;
use dtype::Dtype;

/// Work below this many elements runs on the calling thread when the stream is idle.
const INLINE: usize = 1 << 20;

// ANCHOR: launch
/// Queues `task` on `device`'s current stream; small work on an idle stream runs right away.
fn launch(device: i64, elements: usize, task: impl FnOnce() + Clone + Send + 'static) -> Result<()> {
    let stream = rt::current_stream(device)?;
    if elements <= INLINE {
        stream.run_or_launch(task)?;
    } else {
        stream.launch(task)?;
    }
    Ok(())
}
// ANCHOR_END: launch

// ANCHOR: view
/// The runtime's address of `len` bytes at device address `ptr`, checked to lie inside the
/// operand's storage `[storage[0], storage[0] + storage[1])` (an error, not a crash, if a
/// tensor's metadata points elsewhere). The tensor keeps its storage alive meanwhile.
fn view(ptr: usize, len: usize, storage: &[usize]) -> Result<usize> {
    if len == 0 {
        return Ok(ptr);
    }
    let (base, bytes) = (storage.first().copied().unwrap_or(0), storage.get(1).copied().unwrap_or(0));
    Ok(rt::host_view_within(ptr as *const u8, len, base as *const u8, bytes)? as usize)
}
// ANCHOR_END: view

fn unsupported(what: &str, code: i8) -> Failure {
    Failure::from(rt::Error::InvalidValue(format!("openreg kernels do not compute {what} in dtype code {code}")))
}

/// The runtime's address of a contiguous operand's `numel` elements of `dtype`.
fn dense(t: &Dense, dtype: Dtype) -> Result<usize> {
    view(t.data, t.numel * dtype.size(), &[t.storage, t.storage_len])
}

impl Dense {
    fn dtype_is(&self, dtype: Dtype) -> bool {
        Dtype::from_code(self.dtype) == Some(dtype)
    }
}
