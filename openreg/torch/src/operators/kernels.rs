//! Kernels written in Rust, launched on the current stream of their device. A kernel
//! receives device addresses, checks and translates them to the runtime's view when it is
//! launched, and runs later on the stream's worker (or at once, when the stream is idle and
//! the work is small: a thread hop would cost more than the kernel).

mod attention;
mod conv;
mod ctc;
mod dropout;
mod dtype;
mod elementwise;
mod embedding;
mod factory;
mod foreach;
pub(crate) mod histogram;
pub(crate) mod indexing;
mod integer;
mod linalg;
mod lstm;
mod margin;
mod math;
mod matmul;
mod nll_loss;
mod optim;
mod philox;
mod norm;
mod pool;
mod pooling;
mod random;
mod reduce;
mod rows;
mod rnn;
mod softmax;
pub(crate) mod sort;
mod triangle;
mod walk;

use openreg_runtime as rt;
use rayon::prelude::*;

use crate::error::{Failure, Result};
use crate::ffi::ffi::{
    AttentionShape, Cell, Conv, ConvShape, Dense, LstmShape, Fused, FusedArgs, Loss, LossArgs, Matrix, NllLoss, Norm, NormShape, Pointwise, Pool, PoolShape,
    RandomOp, Reduction, Softmax,
};
use crate::runtime::generator::{Draw, PhiloxGenerator};
use dtype::Dtype;
use elementwise::{Elementwise, Source};
use integer::Int;
use walk::Layout;

/// Elements per parallel chunk: below this a kernel runs on the stream's worker alone.
const CHUNK: usize = 1 << 16;

// ANCHOR: abs
/// `dst[i] = |src[i]|` for `n` contiguous float32 elements on `device`.
pub(crate) fn launch_abs_f32(dst: usize, src: usize, n: usize, device: i64) -> Result<()> {
    if n == 0 {
        return Ok(()); // empty tensors may have no memory at all
    }
    let bytes = n * std::mem::size_of::<f32>();
    let (dst, src) = (rt::host_view(dst as *const u8, bytes)? as usize, rt::host_view(src as *const u8, bytes)? as usize);
    let stream = rt::current_stream(device)?;
    stream.launch(move || {
        // SAFETY: both ranges were checked to lie in live device allocations, which the
        // caching allocator does not hand out again before this stream has run this task.
        let (src, dst) = unsafe {
            (std::slice::from_raw_parts(src as *const f32, n), std::slice::from_raw_parts_mut(dst as *mut f32, n))
        };
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                *d = s.abs();
            }
        });
    })?;
    Ok(())
}
// ANCHOR_END: abs

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

/// True if [`launch_pointwise`] computes `op` with these operand dtypes (output first):
/// float32, float16 and bfloat16 in any mix (integer and bool inputs read as float32), and
/// copies of any dtype to the same dtype.
fn pointwise_supported(op: Pointwise, dtypes: &[i8]) -> bool {
    let Some(inputs) = elementwise::arity(op) else { return false };
    if dtypes.len() != inputs + 1 {
        return false;
    }
    (Dtype::elementwise(dtypes[0]).is_some() && dtypes[1..].iter().all(|&d| Dtype::elementwise_input(d).is_some()))
        || (op == Pointwise::Copy && dtypes[0] == dtypes[1] && dtype::item_size(dtypes[0]).is_some())
}

// ANCHOR: launch_pointwise
/// Launches `op` over TensorIterator-shaped operands: `data`, `dtypes` and the `[operand][dim]`
/// byte `strides` list the output first; an input whose address is 0 is the CPU scalar
/// `constants[k]` instead. `scalar` is alpha, the threshold, or the fill value (`scalar2`: a
/// second one, hardtanh's upper bound). Returns false, having done nothing, if the kernels do
/// not compute `op` in these dtypes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_pointwise(
    op: Pointwise, scalar: f64, scalar2: f64, data: &[usize], storages: &[usize], dtypes: &[i8], constants: &[f64],
    shape: &[i64], strides: &[i64], device: i64,
) -> Result<bool> {
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    if elementwise::arity(op) == dtypes.len().checked_sub(1) && integer::applies(op, dtypes) && data.len() <= walk::MAX_OPERANDS {
        return launch_integer(op, [scalar, scalar2], data, storages, dtypes, constants, shape, strides, device);
    }
    if !pointwise_supported(op, dtypes) || data.len() > walk::MAX_OPERANDS {
        return Ok(false);
    }
    // Contiguous float32 operands, the common case, are one run of memory each.
    let dense = shape.len() == 1 && strides.iter().all(|&s| s == 4) && !data.contains(&0);
    if dense && dtypes.iter().all(|&d| Dtype::from_code(d) == Some(Dtype::Float)) {
        let n = shape[0].max(0) as usize;
        let mut at = [view(data[0], n * 4, storage(0))?; 4]; // the output stands in for absent inputs
        for k in 1..data.len() {
            at[k] = view(data[k], n * 4, storage(k))?;
        }
        launch_dense_f32(op, [scalar, scalar2], at, n, device)?;
        return Ok(true);
    }
    let layout = Layout::new(shape, strides, data.len());
    let n = layout.numel();
    if n == 0 {
        return Ok(true);
    }
    // A same-dtype copy of a dtype we do not compute in moves raw elements of its size.
    if Dtype::elementwise(dtypes[0]).is_none() {
        let size = dtype::item_size(dtypes[0]).unwrap_or(1);
        let (dst, src) = (view(data[0], layout.extent(0, size), storage(0))?, view(data[1], layout.extent(1, size), storage(1))?);
        launch(device, n, move || copy_raw(&layout, dst, src, size))?;
        return Ok(true);
    }
    let dtype_of = |k: usize| Dtype::elementwise(dtypes[k]).unwrap_or(Dtype::Float);
    let out = (view(data[0], layout.extent(0, dtype_of(0).size()), storage(0))?, dtype_of(0));
    let mut inputs = smallvec::SmallVec::new();
    for k in 1..data.len() {
        inputs.push(match data[k] {
            0 => Source::Constant(constants.get(k).copied().unwrap_or(0.0) as f32),
            ptr => {
                let dtype = Dtype::elementwise_input(dtypes[k]).unwrap_or(Dtype::Float);
                Source::Memory { base: view(ptr, layout.extent(k, dtype.size()), storage(k))?, dtype }
            }
        });
    }
    let work = Elementwise { op, scalars: [scalar as f32, scalar2 as f32], out, inputs, layout };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_pointwise

/// [`launch_pointwise`] for integer operands (kernels/integer.rs), in exact arithmetic. False,
/// having done nothing, if a scalar it reads is not an integer that float64 holds exactly
/// (CPU's kernel takes those).
#[allow(clippy::too_many_arguments)]
fn launch_integer(
    op: Pointwise, scalars: [f64; 2], data: &[usize], storages: &[usize], dtypes: &[i8], constants: &[f64],
    shape: &[i64], strides: &[i64], device: i64,
) -> Result<bool> {
    const EXACT: f64 = (1u64 << 53) as f64;
    let exact = |v: f64| v.fract() == 0.0 && v.abs() < EXACT;
    let constant = |k: usize| constants.get(k).copied().unwrap_or(0.0);
    // clamp's absent bounds arrive infinite: the integers' ends.
    let integral = |v: f64| match v {
        v if op == Pointwise::Clamp && v == f64::NEG_INFINITY => Some(i64::MIN),
        v if op == Pointwise::Clamp && v == f64::INFINITY => Some(i64::MAX),
        v => exact(v).then_some(v as i64),
    };
    let mut ints = [0i64; 2];
    for k in 0..integer::scalars_read(op) {
        match integral(scalars[k]) {
            Some(v) => ints[k] = v,
            None => return Ok(false),
        }
    }
    if (1..data.len()).any(|k| data[k] == 0 && !exact(constant(k))) {
        return Ok(false);
    }
    let layout = Layout::new(shape, strides, data.len());
    let n = layout.numel();
    if n == 0 {
        return Ok(true);
    }
    let ty = |k: usize| Int::from_code(dtypes[k]).unwrap_or(Int::I64); // integer::applies checked them
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    let out = (view(data[0], layout.extent(0, ty(0).size()), storage(0))?, ty(0));
    let mut inputs = smallvec::SmallVec::new();
    for k in 1..data.len() {
        inputs.push(match data[k] {
            0 => integer::Source::Constant(ty(k).wrap(constant(k) as i64)),
            ptr => integer::Source::Memory { base: view(ptr, layout.extent(k, ty(k).size()), storage(k))?, ty: ty(k) },
        });
    }
    let work = integer::Integer { op, scalars: ints, out, inputs, layout };
    launch(device, n, move || work.run())?;
    Ok(true)
}

// ANCHOR: launch_same_shape
/// Launches `op` over contiguous float32 operands of one shape, output first (`b` is not read
/// by unary operations): the short way that `same_shape` in Structured.h takes without a
/// TensorIterator. False, having done nothing, if an operand is not float32 or not that size.
pub(crate) fn launch_same_shape(op: Pointwise, scalar: f64, out: Dense, a: Dense, b: Dense, device: i64) -> Result<bool> {
    let Some(inputs) = elementwise::arity(op).filter(|&k| k > 0 && k <= 2) else { return Ok(false) };
    let operands = &[out, a, b][..=inputs];
    if operands.iter().any(|t| Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != out.numel) {
        return Ok(false);
    }
    let mut at = [dense(&out, Dtype::Float)?; 4]; // the output stands in for absent inputs
    for k in 1..operands.len() {
        at[k] = dense(&operands[k], Dtype::Float)?;
    }
    launch_dense_f32(op, [scalar, 0.0], at, out.numel, device)?;
    Ok(true)
}

/// Queues `op` over `n` float32 elements at runtime addresses `at`, output first.
fn launch_dense_f32(op: Pointwise, scalars: [f64; 2], at: [usize; 4], n: usize, device: i64) -> Result<()> {
    if n == 0 {
        return Ok(()); // empty tensors may have no memory at all
    }
    launch(device, n, move || elementwise::run_dense_f32(op, scalars.map(|s| s as f32), at, n))
}
// ANCHOR_END: launch_same_shape

/// Same-dtype copy of elements of `size` bytes, run by run.
fn copy_raw(layout: &Layout, dst: usize, src: usize, size: usize) {
    let (ds, ss) = (layout.strides[0][0], layout.strides[0][1]);
    layout.walk(0, layout.numel(), |o, len| {
        for i in 0..len as isize {
            // SAFETY: both extents were checked against live allocations at launch.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (src as isize + o[1] + i * ss) as *const u8,
                    (dst as isize + o[0] + i * ds) as *mut u8,
                    size,
                )
            };
        }
    });
}

/// Launches a reduction built by `make_reduction` (output first, with 0 strides along the
/// reduced dimensions); `count` is the number of inputs per output, the divisor of a mean.
pub(crate) fn launch_reduction(
    op: Reduction, count: f64, data: &[usize], storages: &[usize], dtypes: &[i8], shape: &[i64],
    strides: &[i64], device: i64,
) -> Result<()> {
    let ints = (Int::from_code(dtypes[0]), Int::from_code(dtypes[1]));
    if let (Some(to), Some(from)) = ints
        && (to, from) != (Int::Bool, Int::Bool)
        && matches!(op, Reduction::Sum | Reduction::Amax | Reduction::Amin)
    {
        let layout = Layout::new(shape, strides, 2);
        let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
        let out = (view(data[0], layout.extent(0, to.size()), storage(0))?, to);
        let input = (view(data[1], layout.extent(1, from.size()), storage(1))?, from);
        let n = layout.numel();
        let work = integer::Reduce { op, out, input, layout };
        return launch(device, n, move || work.run());
    }
    // Bool for maxima and minima only: any() and all() of a bool tensor.
    let dtype = |code| if matches!(op, Reduction::Amax | Reduction::Amin) { Dtype::elementwise(code) } else { Dtype::from_code(code) };
    let (Some(out), Some(input)) = (dtype(dtypes[0]), dtype(dtypes[1])) else {
        return Err(unsupported("this reduction", dtypes[1]));
    };
    let layout = Layout::new(shape, strides, 2);
    let n = layout.numel();
    if n == 0 {
        return Ok(());
    }
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    let out = (view(data[0], layout.extent(0, out.size()), storage(0))?, out);
    let input = (view(data[1], layout.extent(1, input.size()), storage(1))?, input);
    let work = reduce::Reduce { op, count, out, input, layout };
    launch(device, n, move || work.run())
}

/// Launches `out = beta * out + alpha * (a @ b)` over `batch` matrices (see [`Matrix`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_matmul(
    dtype: i8, batch: i64, m: i64, n: i64, k: i64, out: Matrix, a: Matrix, b: Matrix, alpha: f64, beta: f64,
    device: i64,
) -> Result<()> {
    let Some(dt) = Dtype::from_code(dtype) else { return Err(unsupported("matrix products", dtype)) };
    let [batch, m, n, k] = [batch, m, n, k].map(|v| v.max(0) as usize);
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    let checked = |x: &Matrix, rows: usize, cols: usize| -> Result<Matrix> {
        let last = (batch - 1) as i64 * x.batch_stride + (rows - 1) as i64 * x.row_stride + (cols - 1) as i64 * x.col_stride;
        Ok(Matrix { data: view(x.data, (last.max(0) as usize + 1) * dt.size(), &[x.storage, x.storage_len])?, ..*x })
    };
    let work = matmul::Matmul {
        dtype: dt, batch, m, n, k,
        out: checked(&out, m, n)?,
        a: checked(&a, m, k.max(1))?,
        b: checked(&b, k.max(1), n)?,
        alpha, beta,
    };
    launch(device, m * n * k.max(1) * batch, move || work.run())
}

/// The runtime's address of a contiguous operand's `numel` elements of `dtype`.
fn dense(t: &Dense, dtype: Dtype) -> Result<usize> {
    view(t.data, t.numel * dtype.size(), &[t.storage, t.storage_len])
}

// ANCHOR: launch_softmax
/// Launches a softmax-family kernel along the middle dimension of `[outer, size, inner]`
/// contiguous operands (`inputs`: the input, or grad_output and output). Softmax also writes
/// each row's log-sum-exp to `lse` if it is given (attention keeps it for its backward). False,
/// having done nothing, if one of the dtypes is not float32, float16 or bfloat16.
pub(crate) fn launch_softmax(
    op: Softmax, out: Dense, inputs: &[Dense], lse: Dense, outer: i64, size: i64, inner: i64, device: i64,
) -> Result<bool> {
    let [outer, size, inner] = [outer, size, inner].map(|v| v.max(0) as usize);
    let n = outer * size * inner;
    let mut slots = Vec::with_capacity(1 + inputs.len());
    for t in std::iter::once(&out).chain(inputs) {
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != n {
            return Err(rt::Error::InvalidValue(format!("softmax operands of {n} elements expected")).into());
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    let lse = match lse.data {
        0 => 0,
        _ if op == Softmax::Softmax && Dtype::from_code(lse.dtype) == Some(Dtype::Float) && lse.numel == outer * inner => {
            dense(&lse, Dtype::Float)?
        }
        _ => return Err(rt::Error::InvalidValue(format!("softmax's lse must be {} float32 elements", outer * inner)).into()),
    };
    if n == 0 {
        return Ok(true);
    }
    let work = softmax::SoftmaxKernel { op, out: slots[0], inputs: slots.split_off(1), lse, outer, size, inner };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_softmax

// ANCHOR: launch_convolution
/// Launches one pass of a convolution over contiguous float32 operands, each checked to hold
/// the elements `shape` gives it (`bias`: address 0 when there is none).
pub(crate) fn launch_convolution(
    op: Conv, shape: ConvShape, input: Dense, output: Dense, weight: Dense, bias: Dense, device: i64,
) -> Result<()> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("convolution: {what}")));
    let g = conv::Geometry::new(&shape).ok_or_else(|| invalid(format!("invalid shape {shape:?}")))?;
    let (cin, cout) = (g.groups * g.in_channels, g.groups * g.out_channels);
    let mut operands = vec![
        ("input", input, g.batch * cin * g.pixels()),
        ("output", output, g.batch * cout * g.positions()),
        ("weight", weight, cout * g.rows()),
    ];
    if bias.data != 0 {
        operands.push(("bias", bias, cout));
    }
    let mut at = [0usize; 4];
    for (k, (name, t, numel)) in operands.into_iter().enumerate() {
        if Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != numel {
            return Err(invalid(format!("{name} must be {numel} float32 elements, got {} of dtype code {}", t.numel, t.dtype)));
        }
        at[k] = dense(&t, Dtype::Float)?;
    }
    let work = conv::Convolution { op, geometry: g, input: at[0], output: at[1], weight: at[2], bias: at[3] };
    launch(device, g.batch * cout * g.positions() * g.rows(), move || work.run())
}
// ANCHOR_END: launch_convolution

/// Launches a fused recurrent cell; `operands` in [`rnn::layout`]'s order, outputs first, an
/// absent input (a bias, or a gradient that did not reach the cell) with address 0. False,
/// having done nothing, if a dtype is not float32, float16 or bfloat16.
pub(crate) fn launch_rnn_cell(op: Cell, operands: &[Dense], batch: i64, hidden: i64, device: i64) -> Result<bool> {
    let (layout, outputs) = rnn::layout(op);
    let (batch, hidden) = (batch.max(0) as usize, hidden.max(0) as usize);
    if operands.len() != layout.len() {
        return Err(rt::Error::InvalidValue(format!("{op:?} takes {} operands, got {}", layout.len(), operands.len())).into());
    }
    let mut slots = Vec::with_capacity(operands.len());
    for (k, (t, &(width, per_row))) in operands.iter().zip(layout).enumerate() {
        let numel = width * hidden * if per_row { batch } else { 1 };
        if t.data == 0 && k >= outputs && t.numel == 0 {
            slots.push((0, Dtype::Float)); // absent: read as zeros
            continue;
        }
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != numel {
            return Err(rt::Error::InvalidValue(format!("{op:?} operand {k} has {} elements, {numel} expected", t.numel)).into());
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    if batch * hidden == 0 {
        return Ok(true);
    }
    let work = rnn::RnnCell { op, slots, batch, hidden };
    launch(device, batch * hidden * 4, move || work.run())?;
    Ok(true)
}

/// Launches a whole LSTM layer, forward or backward; `operands` in [`lstm::FORWARD`]'s or
/// [`lstm::BACKWARD`]'s order, each checked to be float32 of the size `shape` gives it. An
/// absent input (no bias, no initial state, a gradient that did not reach an output) has
/// address 0 and reads as zeros; outputs and the saved tensors must be present.
pub(crate) fn launch_lstm_layer(backward: bool, shape: LstmShape, operands: &[Dense], device: i64) -> Result<()> {
    let [time, batch, input, hidden] = [shape.time, shape.batch, shape.input, shape.hidden].map(|v| v.max(0) as usize);
    let shape = lstm::Shape { time, batch, input, hidden, reverse: shape.reverse };
    let (names, optional): (&[&str], &[&str]) = if backward {
        (&lstm::BACKWARD, &["grad_input", "grad_output", "grad_hy", "grad_cy", "hx", "cx"])
    } else {
        (&lstm::FORWARD, &["b_ih", "b_hh", "hx", "cx"])
    };
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("LSTM layer: {what}")));
    if operands.len() != names.len() {
        return Err(invalid(format!("{} operands expected, got {}", names.len(), operands.len())));
    }
    if time * batch * hidden == 0 {
        return Err(invalid(format!("empty sequence, batch or hidden size: {shape:?}")));
    }
    let mut at = Vec::with_capacity(names.len());
    for ((t, name), numel) in operands.iter().zip(names).zip(shape.numels(backward)) {
        if t.data == 0 && t.numel == 0 && optional.contains(name) {
            at.push(0);
            continue;
        }
        if Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != numel {
            return Err(invalid(format!("{name} must be {numel} float32 elements, got {} of dtype code {}", t.numel, t.dtype)));
        }
        at.push(dense(t, Dtype::Float)?);
    }
    let work = lstm::Layer { shape, backward, at };
    launch(device, time * batch * hidden * 4 * (input + hidden), move || work.run())
}

/// Launches dropout forward (`mask` written, `out = input * mask * scale`, the mask drawn
/// from `generator`) or backward (`mask` read, `out = grad * mask * scale`) over `n`
/// contiguous elements; `mask` is bool. False, having done nothing, if a dtype is not
/// float32, float16 or bfloat16.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_dropout(
    backward: bool, generator: &PhiloxGenerator, keep: f64, scale: f64, out: Dense, input: Dense, mask: Dense,
    device: i64,
) -> Result<bool> {
    dropout_with(backward, None, generator, keep, scale, out, input, mask, device)
}

/// [`launch_dropout`]'s forward with the numbers at `seed` and `offset` (fused attention keeps
/// them and draws the same mask again in its backward, as flash attention does).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_dropout_at(
    seed: u64, offset: u64, keep: f64, scale: f64, out: Dense, input: Dense, mask: Dense, device: i64,
) -> Result<bool> {
    let unused = PhiloxGenerator::unused();
    dropout_with(false, Some(Draw::Eager { seed, offset }), &unused, keep, scale, out, input, mask, device)
}

#[allow(clippy::too_many_arguments)]
fn dropout_with(
    backward: bool, draw: Option<Draw>, generator: &PhiloxGenerator, keep: f64, scale: f64, out: Dense, input: Dense,
    mask: Dense, device: i64,
) -> Result<bool> {
    const BOOL: i8 = 11; // c10::ScalarType::Bool
    let (Some(out_dtype), Some(in_dtype)) = (Dtype::from_code(out.dtype), Dtype::from_code(input.dtype)) else {
        return Ok(false);
    };
    let n = out.numel;
    if input.numel != n || mask.numel != n || mask.dtype != BOOL {
        return Err(rt::Error::InvalidValue(format!("dropout: {n} elements and a bool mask of as many expected")).into());
    }
    let stream = rt::current_stream(device)?;
    let draw = match draw {
        Some(draw) => draw,
        None if backward => Draw::Eager { seed: 0, offset: 0 },
        None => generator.reserve(4, stream)?,
    };
    let work = dropout::Dropout {
        backward, draw, keep: keep as f32, scale: scale as f32, n,
        out: (dense(&out, out_dtype)?, out_dtype),
        input: (dense(&input, in_dtype)?, in_dtype),
        mask: view(mask.data, n, &[mask.storage, mask.storage_len])?,
    };
    if n > 0 {
        launch(device, n, move || work.run())?;
    }
    Ok(true)
}

/// Philox block 0 at counter column `column` (a seed for a CPU generator).
pub(crate) fn philox_block(seed: u64, column: u64) -> [u32; 4] {
    philox::philox([0, 0, column as u32, (column >> 32) as u32], philox::key(seed))
}

/// QR of `batch` contiguous `m` x `n` matrices (float32 or float64, `dtype`) into `q` and `r`
/// (contiguous; `q.data` 0 for mode "r"). False if the dtype is not one the kernel takes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_qr(
    a: Dense, q: Dense, r: Dense, batch: i64, m: i64, n: i64, complete: bool, device: i64,
) -> Result<bool> {
    let f64s = match a.dtype {
        6 => false,
        7 => true,
        _ => return Ok(false),
    };
    let size = if f64s { 8 } else { 4 };
    let [batch, m, n] = [batch, m, n].map(|v| v.max(0) as usize);
    if batch * m * n == 0 {
        return Ok(true);
    }
    let a = view(a.data, a.numel * size, &[a.storage, a.storage_len])?;
    let q = if q.data == 0 { 0 } else { view(q.data, q.numel * size, &[q.storage, q.storage_len])? };
    let r = view(r.data, r.numel * size, &[r.storage, r.storage_len])?;
    let work = linalg::Qr { batch, m, n, complete, f64s, a, q, r };
    launch(device, batch * m * n * m.min(n), move || work.run())?;
    Ok(true)
}

/// `arange` into a contiguous `out` (see `factory::arange`). False if `out`'s dtype is not
/// one the kernel writes.
pub(crate) fn launch_arange(out: Dense, start: f64, step: f64, istart: i64, istep: i64, device: i64) -> Result<bool> {
    let size = factory::element_size(out.dtype);
    if size == 0 || out.dtype == 11 {
        return Ok(false);
    }
    let data = view(out.data, out.numel * size, &[out.storage, out.storage_len])?;
    let (code, n) = (out.dtype, out.numel);
    // SAFETY: `data` is the checked view of `out`'s n elements.
    launch(device, n, move || unsafe { factory::arange(code, data, n, start, step, istart, istep) })?;
    Ok(true)
}

/// An integer (or bool) `fill_` of a contiguous `out`. False if `out` is not an integer dtype.
pub(crate) fn launch_fill_int(out: Dense, value: i64, device: i64) -> Result<bool> {
    if !matches!(out.dtype, 0..=4 | 11 | 27..=29) {
        return Ok(false);
    }
    let size = factory::element_size(out.dtype);
    let data = view(out.data, out.numel * size, &[out.storage, out.storage_len])?;
    let (code, n) = (out.dtype, out.numel);
    // SAFETY: `data` is the checked view of `out`'s n elements.
    launch(device, n, move || unsafe { factory::fill_int(code, data, n, value) })?;
    Ok(true)
}

/// The index of each row's largest (`max`) or smallest element (kernels/rows.rs).
pub(crate) fn launch_arg_extremum(max: bool, rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool> {
    let (Some(element), 4) = (rows::Element::from_code(input.dtype), out.dtype) else { return Ok(false) };
    let [rows, len] = [rows, len].map(|v| v.max(0) as usize);
    if rows == 0 || len == 0 || input.numel != rows * len || out.numel != rows {
        return Ok(rows == 0);
    }
    let input_view = view(input.data, input.numel * element.size(), &[input.storage, input.storage_len])?;
    let out_view = view(out.data, rows * 8, &[out.storage, out.storage_len])?;
    // SAFETY: both views were checked for their elements.
    launch(device, input.numel, move || unsafe { rows::arg_extremum(max, element, input_view, out_view, rows, len) })?;
    Ok(true)
}

/// The running sum along each row, in the input's dtype (kernels/rows.rs).
pub(crate) fn launch_cumsum(rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool> {
    let Some(element) = rows::Element::from_code(input.dtype) else { return Ok(false) };
    let [rows, len] = [rows, len].map(|v| v.max(0) as usize);
    if input.dtype != out.dtype || input.numel != rows * len || out.numel != input.numel {
        return Ok(false);
    }
    if input.numel == 0 {
        return Ok(true);
    }
    let bytes = input.numel * element.size();
    let input_view = view(input.data, bytes, &[input.storage, input.storage_len])?;
    let out_view = view(out.data, bytes, &[out.storage, out.storage_len])?;
    // SAFETY: both views were checked for their elements.
    launch(device, input.numel, move || unsafe { rows::cumsum(element, input_view, out_view, rows, len) })?;
    Ok(true)
}

/// `tril`/`triu` of `batch` contiguous `rows` x `cols` matrices into `out` (contiguous, the same
/// dtype; the same address in place). False if the dtype's size is not one the kernel moves.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_triangle(
    input: Dense, out: Dense, rows: i64, cols: i64, diagonal: i64, upper: bool, device: i64,
) -> Result<bool> {
    let size = factory::element_size(input.dtype);
    if size == 0 || input.dtype != out.dtype || input.numel != out.numel {
        return Ok(false);
    }
    let [rows, cols] = [rows, cols].map(|v| v.max(0) as usize);
    if rows * cols == 0 || input.numel == 0 {
        return Ok(true);
    }
    let bytes = input.numel * size;
    let input_view = view(input.data, bytes, &[input.storage, input.storage_len])?;
    let out_view = view(out.data, bytes, &[out.storage, out.storage_len])?;
    if input_view != out_view && input_view < out_view + bytes && out_view < input_view + bytes {
        return Ok(false); // partial overlap: the caller copies first
    }
    let work = triangle::Triangle {
        batch: input.numel / (rows * cols), rows, cols, size, diagonal, upper, input: input_view, out: out_view,
    };
    // SAFETY: both views checked above, equal or disjoint.
    launch(device, input.numel, move || unsafe { work.run() })?;
    Ok(true)
}

// ANCHOR: launch_random
/// Launches a random operator over `out` (contiguous): `op` with parameters `a`, `b`
/// (from/to, mean/std, lambda, p, median/sigma) or `from`, `range` (integers; range 0 is all
/// of int64), drawing from `generator`. `p` is bernoulli's float32 probability tensor, read
/// and checked in [0, 1] before the launch (that waits for the stream, as CPU's check reads
/// the values). False, having done nothing, if the kernel does not write `out`'s dtype.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_random(
    op: RandomOp, a: f64, b: f64, from: i64, range: u64, out: Dense, p: Dense, generator: &PhiloxGenerator,
    device: i64,
) -> Result<bool> {
    use random::Distribution as D;
    let dist = match op {
        RandomOp::Uniform => D::Uniform { from: a, to: b },
        RandomOp::Normal => D::Normal { mean: a, std: b },
        RandomOp::LogNormal => D::LogNormal { mean: a, std: b },
        RandomOp::Exponential => D::Exponential { lambda: a },
        RandomOp::Geometric => D::Geometric { p: a },
        RandomOp::Cauchy => D::Cauchy { median: a, sigma: b },
        RandomOp::Bernoulli => D::Bernoulli { p: a },
        RandomOp::BernoulliTensor => D::BernoulliTensor { p: 0 },
        RandomOp::Integers => D::Integers { from, range },
        _ => return Ok(false),
    };
    let (Some(size), true) = (dtype::item_size(out.dtype), random::supported(dist, out.dtype)) else {
        return Ok(false);
    };
    let n = out.numel;
    let stream = rt::current_stream(device)?;
    let dist = match dist {
        D::BernoulliTensor { .. } => {
            const FLOAT: i8 = 6;
            if p.numel != n || p.dtype != FLOAT {
                return Err(rt::Error::InvalidValue(format!("bernoulli: {n} float32 probabilities expected")).into());
            }
            let at = view(p.data, n * 4, &[p.storage, p.storage_len])?;
            stream.synchronize()?;
            // SAFETY: checked inside p's storage; its stream has run.
            let values = unsafe { std::slice::from_raw_parts(at as *const f32, n) };
            if let Some(bad) = values.iter().find(|v| !(0.0..=1.0).contains(*v)) {
                return Err(Failure::runtime(format!(
                    "Expected p_in >= 0 && p_in <= 1 to be true, but got false (a probability is {bad})"
                )));
            }
            D::BernoulliTensor { p: at }
        }
        dist => dist,
    };
    if n == 0 {
        return Ok(true);
    }
    let data = view(out.data, n * size, &[out.storage, out.storage_len])?;
    let draw = generator.reserve(4, stream)?;
    let work = random::Random { dist, out: random::Output { data, numel: n, dtype: out.dtype }, draw };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_random

/// `randperm(n)` into `out` (contiguous, `n` elements of an integer or float dtype that holds
/// `n - 1`, checked by the caller). False if the dtype is not one the kernels write.
pub(crate) fn launch_randperm(out: Dense, generator: &PhiloxGenerator, device: i64) -> Result<bool> {
    let n = out.numel;
    let Some(size) = dtype::item_size(out.dtype).filter(|_| matches!(out.dtype, 0..=4 | 6 | 7)) else {
        return Ok(false);
    };
    if n == 0 {
        return Ok(true);
    }
    let data = view(out.data, n * size, &[out.storage, out.storage_len])?;
    let stream = rt::current_stream(device)?;
    let draw = generator.reserve(4, stream)?;
    let code = out.dtype;
    launch(device, n, move || {
        let (seed, offset) = draw.resolve();
        let perm = random::permutation(n, seed, offset);
        // SAFETY: checked: n elements of `size` bytes at `data`.
        unsafe {
            match code {
                6 => std::slice::from_raw_parts_mut(data as *mut f32, n).iter_mut().zip(&perm).for_each(|(o, &v)| *o = v as f32),
                7 => std::slice::from_raw_parts_mut(data as *mut f64, n).iter_mut().zip(&perm).for_each(|(o, &v)| *o = v as f64),
                _ => random::store_perm(code, data, &perm),
            }
        }
    })?;
    Ok(true)
}

/// `samples` draws from each of `rows` distributions over `categories` (float64 `weights`,
/// contiguous) into `out` (int64, contiguous). Runs on the calling thread after the stream,
/// because CPU raises for a bad distribution and that needs the values.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_multinomial(
    weights: Dense, rows: i64, categories: i64, samples: i64, replacement: bool, out: Dense,
    generator: &PhiloxGenerator, device: i64,
) -> Result<()> {
    let [rows, categories, samples] = [rows, categories, samples].map(|v| v.max(0) as usize);
    if weights.numel != rows * categories || weights.dtype != 7 || out.numel != rows * samples || out.dtype != 4 {
        return Err(rt::Error::InvalidValue("multinomial: float64 weights and int64 output expected".into()).into());
    }
    let stream = rt::current_stream(device)?;
    let w = view(weights.data, weights.numel * 8, &[weights.storage, weights.storage_len])?;
    let o = view(out.data, out.numel * 8, &[out.storage, out.storage_len])?;
    stream.synchronize()?;
    // SAFETY: both checked inside their storage; the stream has run.
    let w = unsafe { std::slice::from_raw_parts(w as *const f64, weights.numel) };
    if w.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(Failure::runtime("probability tensor contains either `inf`, `nan` or element < 0".into()));
    }
    for row in w.chunks(categories.max(1)) {
        if row.iter().sum::<f64>() <= 0.0 {
            return Err(Failure::runtime("invalid multinomial distribution (sum of probabilities <= 0)".into()));
        }
    }
    let Draw::Eager { seed, offset } = generator.reserve(4, stream)? else {
        return Err(Failure::runtime("multinomial cannot be captured in a graph: it reads its weights".into()));
    };
    let values = random::multinomial(w, rows, categories, samples, replacement, seed, offset);
    // SAFETY: checked above.
    unsafe { std::slice::from_raw_parts_mut(o as *mut i64, out.numel) }.copy_from_slice(&values);
    Ok(())
}

// ANCHOR: launch_norm
/// Launches a normalization kernel; `operands` in [`norm::operands`]'s order, an absent one
/// (no weight, a gradient not asked for, batch norm's statistics in eval) with address 0.
/// False, having done nothing, if a dtype is not float32, float16 or bfloat16, or the batch is
/// empty (CPU's kernel then says what the statistics of nothing are).
pub(crate) fn launch_norm(op: Norm, shape: NormShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op:?}: {what}")));
    let (count, _) = norm::operands(op);
    if operands.len() != count {
        return Err(invalid(format!("{count} operands expected, got {}", operands.len())));
    }
    let [n, c, s, g] = [shape.batch, shape.channels, shape.inner, shape.groups].map(|v| v.max(0) as usize);
    if g == 0 || c % g != 0 {
        return Err(invalid(format!("{c} channels do not split into {g} groups")));
    }
    let (all, stats) = (n * c * s, if matches!(op, Norm::GroupNorm | Norm::GroupNormBackward) { n * g } else { c });
    let (sizes, required): (&[usize], &[usize]) = match op {
        Norm::GroupNorm => (&[all, stats, stats, all, c, c], &[0, 1, 2, 3]),
        Norm::GroupNormBackward => (&[all, c, c, all, all, stats, stats, c], &[3, 4, 5, 6]),
        Norm::BatchNorm if shape.training => (&[all, c, c, c, c, all, c, c], &[0, 1, 2, 5]),
        Norm::BatchNorm => (&[all, c, c, c, c, all, c, c], &[0, 3, 4, 5]),
        _ if shape.training => (&[all, c, c, all, all, c, c, c, c, c], &[3, 4, 8, 9]),
        _ => (&[all, c, c, all, all, c, c, c, c, c], &[3, 4, 6, 7]),
    };
    if all == 0 {
        // Nothing to write is done; statistics or gradients of nothing are CPU's to define.
        return Ok(operands[..norm::operands(op).1].iter().all(|t| t.numel == 0));
    }
    let mut slots = Vec::with_capacity(count);
    for (k, t) in operands.iter().enumerate() {
        if t.data == 0 || (t.numel == 0 && sizes[k] != 0) {
            if required.contains(&k) {
                return Err(invalid(format!("operand {k} is required")));
            }
            slots.push((0, Dtype::Float));
            continue;
        }
        let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(false) };
        if t.numel != sizes[k] {
            return Err(invalid(format!("operand {k} has {} elements, {} expected", t.numel, sizes[k])));
        }
        slots.push((dense(t, dtype)?, dtype));
    }
    let work = norm::Normalization { op, shape, slots };
    launch(device, all, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_norm

/// Launches a pooling kernel; `operands` in [`pooling::operands`]'s order (indices are int64).
/// False, having done nothing, if a dtype is not ours or an operand is empty.
pub(crate) fn launch_pool(op: Pool, shape: PoolShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op:?}: {what}")));
    if operands.len() != pooling::operands(op) {
        return Err(invalid(format!("{} operands expected, got {}", pooling::operands(op), operands.len())));
    }
    let s = &shape;
    let positive = [s.kernel, s.stride, s.dilation].iter().flatten().all(|&v| v > 0);
    let sizes = [s.input, s.output].iter().flatten().chain(&s.padding).all(|&v| v >= 0);
    let adaptive = matches!(op, Pool::AdaptiveAvgForward | Pool::AdaptiveAvgBackward | Pool::AdaptiveMaxForward | Pool::AdaptiveMaxBackward);
    if s.planes < 0 || !sizes || (!adaptive && !positive) {
        return Err(invalid(format!("invalid shape {shape:?}")));
    }
    let volume = |v: [i64; 3]| v.iter().try_fold(s.planes as usize, |n, &d| n.checked_mul(d as usize));
    let (Some(input), Some(output)) = (volume(s.input), volume(s.output)) else {
        return Err(invalid(format!("invalid shape {shape:?}")));
    };
    if input == 0 || output == 0 {
        let outputs = if pooling::indices_slot(op) == Some(1) { 2 } else { 1 };
        return Ok(operands[..outputs].iter().all(|t| t.numel == 0));
    }
    let sizes: [usize; 3] = match (pooling::is_backward(op), pooling::indices_slot(op)) {
        (false, Some(_)) => [output, output, input],
        (true, Some(_)) => [input, output, output],
        (false, None) => [output, input, 0],
        (true, None) => [input, output, 0],
    };
    let indices = pooling::indices_slot(op);
    let mut slots = Vec::with_capacity(operands.len());
    for (k, t) in operands.iter().enumerate() {
        let dtype = Dtype::from_code(t.dtype);
        if (Some(k) == indices && t.dtype != INT64) || (Some(k) != indices && dtype.is_none()) {
            return Ok(false);
        }
        if t.numel != sizes[k] {
            return Err(invalid(format!("operand {k} has {} elements, {} expected", t.numel, sizes[k])));
        }
        let size = dtype.map_or(8, Dtype::size);
        slots.push((view(t.data, t.numel * size, &[t.storage, t.storage_len])?, dtype));
    }
    let work = pooling::Pooling { op, shape, slots };
    launch(device, input + output, move || work.run())?;
    Ok(true)
}

// ANCHOR: launch_foreach
/// Launches `op` over lists of contiguous float32 tensors in one go (see [`foreach`]). False,
/// having done nothing, if a tensor is of another dtype or size: C++ then runs per tensor.
pub(crate) fn launch_foreach(
    op: Pointwise, operands: &[Dense], constants: &[f64], scalars: &[f64], tensors: usize, device: i64,
) -> Result<bool> {
    let Some(arity) = elementwise::arity(op) else { return Ok(false) };
    let per = arity + 1;
    if operands.len() != tensors * per || constants.len() != operands.len() || scalars.len() != 2 * tensors {
        return Err(rt::Error::InvalidValue(format!("{op:?}: operand lists of mismatched lengths")).into());
    }
    let float = |t: &Dense| Dense::dtype_is(t, Dtype::Float);
    let mut items = Vec::with_capacity(tensors);
    for (i, ops) in operands.chunks_exact(per).enumerate() {
        let out = &ops[0];
        if !float(out) {
            return Ok(false);
        }
        let mut inputs = smallvec::SmallVec::new();
        for (k, t) in ops.iter().enumerate().skip(1) {
            inputs.push(match t.data {
                0 if t.numel == 0 => foreach::Operand::Constant(constants[i * per + k] as f32),
                _ if !float(t) || t.numel != out.numel => return Ok(false),
                _ => foreach::Operand::Memory(dense(t, Dtype::Float)?),
            });
        }
        if out.numel > 0 {
            let scalars = [scalars[2 * i] as f32, scalars[2 * i + 1] as f32];
            items.push(foreach::Item { out: dense(out, Dtype::Float)?, inputs, scalars, n: out.numel });
        }
    }
    let total = items.iter().map(|item| item.n).sum();
    let work = foreach::Foreach { op, items };
    launch(device, total, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_foreach

impl Dense {
    fn dtype_is(&self, dtype: Dtype) -> bool {
        Dtype::from_code(self.dtype) == Some(dtype)
    }
}

/// The runtime slot of an operand of `numel` elements of our dtypes (address 0 when absent
/// and allowed to be); `Ok(None)` for a dtype we do not compute in.
fn slot(t: &Dense, numel: usize, required: bool, what: &str) -> Result<Option<(usize, Dtype)>> {
    if t.data == 0 && t.numel == 0 {
        if required && numel > 0 {
            return Err(rt::Error::InvalidValue(format!("{what} is required")).into());
        }
        return Ok(Some((0, Dtype::Float)));
    }
    let Some(dtype) = Dtype::from_code(t.dtype) else { return Ok(None) };
    if t.numel != numel {
        return Err(rt::Error::InvalidValue(format!("{what} has {} elements, {numel} expected", t.numel)).into());
    }
    Ok(Some((dense(t, dtype)?, dtype)))
}

/// Launches a fused optimizer step over every parameter. False, having done nothing, if an
/// operand's dtype is not float32, float16 or bfloat16.
pub(crate) fn launch_fused_step(
    kind: Fused, args: FusedArgs, operands: &[Dense], grad_scale: Dense, found_inf: Dense, device: i64,
) -> Result<bool> {
    let k = optim::per_param(kind);
    if operands.len() % k != 0 {
        return Err(rt::Error::InvalidValue(format!("{kind:?}: {k} operands per parameter expected")).into());
    }
    const NAMES: [&str; 6] = ["param", "grad", "exp_avg or momentum_buffer", "exp_avg_sq", "max_exp_avg_sq", "step"];
    let (mut slots, mut sizes) = (Vec::with_capacity(operands.len()), Vec::new());
    for ops in operands.chunks_exact(k) {
        let n = ops[0].numel;
        for (j, t) in ops.iter().enumerate() {
            let required = match (kind, j) {
                (Fused::Sgd, 2) => args.momentum != 0.0,
                (_, 4) => args.amsgrad,
                _ => true,
            };
            let step = kind != Fused::Sgd && j == 5;
            let Some(s) = slot(t, if step { 1 } else { n }, required, NAMES[j])? else { return Ok(false) };
            slots.push(s);
        }
        sizes.push(n);
    }
    let scalar = |t: &Dense, what| -> Result<Option<(usize, Dtype)>> {
        if t.data != 0 && !t.dtype_is(Dtype::Float) {
            return Ok(None);
        }
        slot(t, 1, false, what)
    };
    let (Some(grad_scale), Some(found_inf)) = (scalar(&grad_scale, "grad_scale")?, scalar(&found_inf, "found_inf")?) else {
        return Ok(false);
    };
    let total = sizes.iter().sum();
    let work = optim::FusedStep { kind, args, slots, sizes, grad_scale, found_inf };
    launch(device, total, move || work.run())?;
    Ok(true)
}

/// GradScaler's unscale-and-check over `grads`. False if a dtype is not ours.
pub(crate) fn launch_amp_unscale(grads: &[Dense], found_inf: Dense, inv_scale: Dense, device: i64) -> Result<bool> {
    if !found_inf.dtype_is(Dtype::Float) || !inv_scale.dtype_is(Dtype::Float) {
        return Ok(false);
    }
    let (Some(found_inf), Some(inv_scale)) = (slot(&found_inf, 1, true, "found_inf")?, slot(&inv_scale, 1, true, "inv_scale")?) else {
        return Ok(false);
    };
    let mut list = Vec::with_capacity(grads.len());
    for g in grads {
        let Some(s) = slot(g, g.numel, true, "a gradient")? else { return Ok(false) };
        if g.numel > 0 {
            list.push((s, g.numel));
        }
    }
    let total = list.iter().map(|g| g.1).sum();
    let work = optim::Unscale { grads: list, found_inf, inv_scale };
    launch(device, total, move || work.run())?;
    Ok(true)
}

/// Host indices as offsets, each checked against `size`.
fn checked_indices(indices: &[i64], size: usize) -> Result<Vec<usize>> {
    indices
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&i| i < size).ok_or_else(|| Failure::index(format!("index {i} is out of range for size {size}"))))
        .collect()
}

// ANCHOR: index_select
/// Launches the row gather of `index_select` over contiguous `[outer, size, inner]` `src` into
/// `[outer, indices, inner]` `dst` (any dtype: rows are bytes, `item` per element).
#[allow(clippy::too_many_arguments)]
pub(crate) fn index_select(
    src: Dense, dst: Dense, item: usize, indices: &[i64], outer: usize, size: usize, inner: usize, device: i64,
) -> Result<()> {
    if src.dtype != dst.dtype || item == 0 {
        return Err(rt::Error::InvalidValue("index_select: operands of one dtype expected".into()).into());
    }
    if src.numel != outer * size * inner || dst.numel != outer * indices.len() * inner {
        return Err(rt::Error::InvalidValue("index_select operands do not match their shapes".into()).into());
    }
    let indices = checked_indices(indices, size)?;
    if dst.numel == 0 {
        return Ok(());
    }
    let work = embedding::IndexSelect {
        src: view(src.data, src.numel * item, &[src.storage, src.storage_len])?,
        dst: view(dst.data, dst.numel * item, &[dst.storage, dst.storage_len])?,
        indices, outer, size, inner, item,
    };
    launch(device, dst.numel, move || work.run())
}
// ANCHOR_END: index_select

/// Launches `embedding_dense_backward` into a `[num_weights, dim]` `grad_weight` from
/// `[indices, dim]` `grad_output`. False if a dtype is not ours. (`padding_idx` < 0: none.)
pub(crate) fn embedding_backward(
    grad_weight: Dense, grad_output: Dense, indices: &[i64], dim: usize, padding_idx: i64, scale_by_freq: bool,
    device: i64,
) -> Result<bool> {
    let (Some(wt), Some(gt)) = (Dtype::from_code(grad_weight.dtype), Dtype::from_code(grad_output.dtype)) else {
        return Ok(false);
    };
    let n = indices.len();
    let num_weights = if dim > 0 { grad_weight.numel / dim } else { 0 };
    if grad_output.numel != n * dim || grad_weight.numel != num_weights * dim {
        return Err(rt::Error::InvalidValue("embedding_dense_backward operands do not match their shapes".into()).into());
    }
    if grad_weight.numel == 0 {
        return Ok(true);
    }
    let work = embedding::EmbeddingBackward {
        grad_weight: (dense(&grad_weight, wt)?, wt),
        grad_output: (dense(&grad_output, gt)?, gt),
        indices: checked_indices(indices, num_weights)?,
        num_weights, dim,
        padding_idx: usize::try_from(padding_idx).ok(),
        scale_by_freq,
    };
    launch(device, grad_output.numel, move || work.run())?;
    Ok(true)
}

/// `c10::ScalarType::Int`.
const INT32: i8 = 3;

/// GradScaler's scale update. False if a dtype is not ours.
pub(crate) fn launch_amp_update_scale(
    scale: Dense, growth_tracker: Dense, found_inf: Dense, growth: f64, backoff: f64, interval: i64, device: i64,
) -> Result<bool> {
    if !scale.dtype_is(Dtype::Float) || !found_inf.dtype_is(Dtype::Float) || growth_tracker.dtype != INT32 {
        return Ok(false);
    }
    let (Some(scale), Some(found_inf)) = (slot(&scale, 1, true, "scale")?, slot(&found_inf, 1, true, "found_inf")?) else {
        return Ok(false);
    };
    if growth_tracker.numel != 1 {
        return Err(rt::Error::InvalidValue("growth_tracker must hold one element".into()).into());
    }
    let tracker = view(growth_tracker.data, 4, &[growth_tracker.storage, growth_tracker.storage_len])?;
    let interval = i32::try_from(interval).map_err(|_| rt::Error::InvalidValue(format!("growth_interval {interval} is too large")))?;
    let work = optim::UpdateScale { scale, growth_tracker: tracker, found_inf, growth: growth as f32, backoff: backoff as f32, interval };
    launch(device, 1, move || work.run())?;
    Ok(true)
}

/// `c10::ScalarType::Long`.
const INT64: i8 = 4;

// ANCHOR: nll_targets
/// The class indices of `target`, checked like CPU does (an `IndexError` naming the first bad
/// one). Reading them needs their values: the loss waits for its stream to finish what it
/// queued, then computes on the calling thread. (A GPU would check inside the kernel and
/// report a failure at the next synchronization, as CUDA's device-side asserts do.)
fn nll_targets(args: &NllLoss, target: &Dense, device: i64) -> Result<Vec<i64>> {
    rt::current_stream(device)?.synchronize()?;
    let base = view(target.data, target.numel * 8, &[target.storage, target.storage_len])? as *const i64;
    // SAFETY: `numel` int64 elements, checked against their allocation; the stream is idle.
    let targets: Vec<i64> = (0..target.numel).map(|i| unsafe { base.add(i).read_unaligned() }).collect();
    match nll_loss::invalid_target(args, &targets) {
        Some(t) => Err(Failure::index(format!("Target {t} is out of bounds."))),
        None => Ok(targets),
    }
}
// ANCHOR_END: nll_targets

/// Float operands of one dtype and int64 targets, or false (the caller runs CPU's kernel).
fn nll_supported(float: &[&Dense], weight: &Dense, target: &Dense) -> Option<Dtype> {
    let dtype = Dtype::from_code(float[0].dtype)?;
    let same = float.iter().all(|t| t.dtype == float[0].dtype) && (weight.data == 0 || weight.dtype == float[0].dtype);
    (same && target.dtype == INT64).then_some(dtype)
}

/// The element counts the loss kernels index by, checked (the meta functions guarantee them;
/// a mismatch is an error here, never an access outside a tensor).
fn nll_shapes(args: &NllLoss, targets: usize, by_class: &Dense, by_sample: &Dense, weight: &Dense, total: &Dense) -> Result<()> {
    let classes = args.classes.max(0) as usize;
    let samples = if args.per_sample { targets } else { 1 };
    if by_class.numel != targets * classes
        || by_sample.numel != samples
        || total.numel != 1
        || (weight.data != 0 && weight.numel != classes)
    {
        return Err(rt::Error::InvalidValue("nll_loss operands do not match their shapes".into()).into());
    }
    Ok(())
}

/// Runs `f` on the calling thread; a panic becomes an error rather than crossing into C++.
fn guarded(f: impl FnOnce()) -> Result<bool> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map(|()| true)
        .map_err(|_| rt::Error::InvalidValue("an openreg loss kernel panicked".into()).into())
}

/// `nll_loss_forward`: `output` and `total_weight` from `input` and `target` (`weight`'s
/// address is 0 when there is none). False if the dtypes are not ours.
pub(crate) fn nll_loss_forward(
    args: NllLoss, output: Dense, total_weight: Dense, input: Dense, target: Dense, weight: Dense, device: i64,
) -> Result<bool> {
    let Some(dt) = nll_supported(&[&input, &output, &total_weight], &weight, &target) else { return Ok(false) };
    let targets = nll_targets(&args, &target, device)?;
    nll_shapes(&args, targets.len(), &input, &output, &weight, &total_weight)?;
    let (output, total_weight, input) = ((dense(&output, dt)?, dt), (dense(&total_weight, dt)?, dt), (dense(&input, dt)?, dt));
    let weight = if weight.data == 0 { None } else { Some((dense(&weight, dt)?, dt)) };
    // SAFETY: every operand was checked against its allocation, targets against the classes.
    guarded(|| unsafe { nll_loss::forward(&args, output, total_weight, input, &targets, weight) })
}

/// `nll_loss_backward`: `grad_input` from `grad_output`, `target` and `total_weight`.
pub(crate) fn nll_loss_backward(
    args: NllLoss, grad_input: Dense, grad_output: Dense, target: Dense, weight: Dense, total_weight: Dense, device: i64,
) -> Result<bool> {
    let Some(dt) = nll_supported(&[&grad_input, &grad_output, &total_weight], &weight, &target) else { return Ok(false) };
    let targets = nll_targets(&args, &target, device)?;
    nll_shapes(&args, targets.len(), &grad_input, &grad_output, &weight, &total_weight)?;
    let slot = |t: &Dense| -> Result<nll_loss::Slot> { Ok((dense(t, dt)?, dt)) };
    let (grad_input, grad_output, total_weight) = (slot(&grad_input)?, slot(&grad_output)?, slot(&total_weight)?);
    let weight = if weight.data == 0 { None } else { Some(slot(&weight)?) };
    // SAFETY: as in nll_loss_forward.
    guarded(|| unsafe { nll_loss::backward(&args, grad_input, grad_output, &targets, weight, total_weight) })
}

/// The values of a float operand (one of the kernels' dtypes), or of an int32/int64 one, as a
/// host copy. The stream must be idle.
fn host_floats(t: &Dense, dtype: Dtype) -> Result<Vec<f64>> {
    if t.numel == 0 {
        return Ok(Vec::new());
    }
    let base = dense(t, dtype)?;
    let mut values = vec![0f32; t.numel];
    // SAFETY: `numel` elements of `dtype`, checked against their allocation.
    unsafe { dtype::load(dtype, base as *const u8, dtype.size() as isize, &mut values) };
    Ok(values.into_iter().map(f64::from).collect())
}

fn host_ints(t: &Dense) -> Result<Vec<i64>> {
    if t.numel == 0 {
        return Ok(Vec::new());
    }
    let size = if t.dtype == INT32 { 4 } else { 8 };
    let base = view(t.data, t.numel * size, &[t.storage, t.storage_len])?;
    // SAFETY: as in host_floats.
    Ok((0..t.numel)
        .map(|i| unsafe {
            if size == 4 { i64::from(((base + 4 * i) as *const i32).read_unaligned()) } else { ((base + 8 * i) as *const i64).read_unaligned() }
        })
        .collect())
}

fn store_floats(t: &Dense, dtype: Dtype, values: &[f64]) -> Result<()> {
    if values.len() != t.numel {
        return Err(Failure::runtime(format!("a loss kernel wrote {} values into {} elements", values.len(), t.numel)));
    }
    if values.is_empty() {
        return Ok(());
    }
    let base = dense(t, dtype)?;
    let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    // SAFETY: as in host_floats.
    unsafe { dtype::store(dtype, base as *mut u8, dtype.size() as isize, &values) };
    Ok(())
}

/// A margin or CTC loss (`kernels/margin.rs`, `kernels/ctc.rs`): like the NLL loss it reads its
/// targets' values to check them, so it waits for the stream and computes on the calling thread.
/// `operands` in [`Loss`]'s order, float operands of one dtype, targets int64 (CTC: or int32).
/// False if a dtype is not ours.
pub(crate) fn launch_loss(op: Loss, args: LossArgs, operands: &[Dense], lengths: &[i64], device: i64) -> Result<bool> {
    let (targets, count) = match op {
        Loss::MultiMargin => (2, 4),
        Loss::MultiMarginBackward => (3, 5),
        Loss::MultilabelMargin => (3, 4),
        Loss::MultilabelMarginBackward => (3, 5),
        Loss::Ctc => (3, 4),
        Loss::CtcBackward => (3, 6),
        _ => return Ok(false),
    };
    if operands.len() != count {
        return Err(rt::Error::InvalidValue(format!("{op:?}: {count} operands expected, got {}", operands.len())).into());
    }
    let Some(dt) = Dtype::from_code(operands[0].dtype) else { return Ok(false) };
    let integer = |t: &Dense| t.dtype == INT64 || (t.dtype == INT32 && matches!(op, Loss::Ctc | Loss::CtcBackward));
    let absent = |t: &Dense| t.data == 0 && matches!(op, Loss::MultiMargin | Loss::MultiMarginBackward);
    for (k, t) in operands.iter().enumerate() {
        if !(if k == targets { integer(t) } else { absent(t) || t.dtype == operands[0].dtype }) {
            return Ok(false);
        }
    }
    let classes = args.classes.max(0) as usize;
    if classes == 0 || args.batch < 0 {
        return Err(rt::Error::InvalidValue(format!("{op:?}: invalid sizes {args:?}")).into());
    }
    rt::current_stream(device)?.synchronize()?;
    let f = |k: usize| host_floats(&operands[k], dt);
    let target = host_ints(&operands[targets])?;
    let sized = |values: &[f64], n: usize, what: &str| -> Result<()> {
        if values.len() != n {
            return Err(rt::Error::InvalidValue(format!("{op:?}: {what} of {} elements, {n} expected", values.len())).into());
        }
        Ok(())
    };
    let error = Failure::runtime;
    match op {
        Loss::MultiMargin | Loss::MultiMarginBackward => {
            let first = if op == Loss::MultiMargin { 1 } else { 2 };
            let input = f(first)?;
            sized(&input, target.len() * classes, "input")?;
            let weight = if operands[first + 2].data == 0 { None } else { Some(f(first + 2)?) };
            if let Some(w) = &weight {
                sized(w, classes, "weight")?;
            }
            if op == Loss::MultiMargin {
                store_floats(&operands[0], dt, &margin::multi_margin(&args, &input, &target, weight.as_deref()).map_err(error)?)?;
            } else {
                let grad = margin::multi_margin_backward(&args, &f(1)?, &input, &target, weight.as_deref()).map_err(error)?;
                store_floats(&operands[0], dt, &grad)?;
            }
        }
        Loss::MultilabelMargin => {
            let input = f(2)?;
            sized(&input, target.len(), "input")?;
            let (loss, is_target) = margin::multilabel_margin(&args, &input, &target).map_err(error)?;
            store_floats(&operands[0], dt, &loss)?;
            store_floats(&operands[1], dt, &is_target)?;
        }
        Loss::MultilabelMarginBackward => {
            let input = f(2)?;
            sized(&input, target.len(), "input")?;
            let grad = margin::multilabel_margin_backward(&args, &f(1)?, &input, &target).map_err(error)?;
            store_floats(&operands[0], dt, &grad)?;
        }
        Loss::Ctc | Loss::CtcBackward => {
            let batch = args.batch as usize;
            let (input_lengths, target_lengths) = lengths.split_at(lengths.len().min(batch));
            let log_probs = f(2)?;
            sized(&log_probs, args.time.max(0) as usize * batch * classes, "log_probs")?;
            let valid = |l: &[i64], max: i64| l.len() == batch && l.iter().all(|&v| (0..=max).contains(&v));
            if !valid(input_lengths, args.time) || !valid(target_lengths, args.max_target) {
                return Err(rt::Error::InvalidValue(format!("{op:?}: lengths {lengths:?} outside the operands")).into());
            }
            let sequences = ctc::split_targets(&args, &target, target_lengths).map_err(error)?;
            let alpha_len = batch * args.time as usize * (2 * args.max_target as usize + 1);
            let single = |v: Vec<f64>| -> Vec<f32> { v.into_iter().map(|v| v as f32).collect() };
            let double = |v: Vec<f32>| -> Vec<f64> { v.into_iter().map(f64::from).collect() };
            let log_probs = single(log_probs);
            if op == Loss::Ctc {
                let (nll, alpha) = ctc::forward(&args, &log_probs, &sequences, input_lengths);
                store_floats(&operands[0], dt, &double(nll))?;
                store_floats(&operands[1], dt, &double(alpha))?;
            } else {
                let (grad_out, nll, alpha) = (f(1)?, f(4)?, f(5)?);
                sized(&grad_out, batch, "grad_out")?;
                sized(&nll, batch, "neg_log_likelihood")?;
                sized(&alpha, alpha_len, "log_alpha")?;
                let grad = ctc::backward(&args, &single(grad_out), &log_probs, &sequences, input_lengths, &single(nll), &single(alpha));
                store_floats(&operands[0], dt, &double(grad))?;
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Launches attention's forward or backward (`kernels/attention.rs`). Every float operand of
/// one dtype but the float32 log-sum-exp; the mask boolean or of the operands' dtype. False,
/// having done nothing, if a dtype is not ours.
pub(crate) fn launch_attention(backward: bool, shape: AttentionShape, operands: &[Dense], mask: Dense, device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("attention: {what}")));
    let s = &shape;
    let dims = [s.batch, s.heads, s.kv_heads, s.query_len, s.key_len, s.head_dim, s.value_dim];
    if dims.iter().any(|&v| v < 0) || s.kv_heads == 0 || s.heads % s.kv_heads != 0 || s.mask_strides.iter().any(|&v| v < 0) {
        return Err(invalid(format!("invalid shape {shape:?}")));
    }
    let [b, h, hkv, l, n, d, dv] = dims.map(|v| v as usize);
    let (q, k, v, o, lse) = (b * h * l * d, b * hkv * n * d, b * hkv * n * dv, b * h * l * dv, b * h * l);
    let sizes: &[usize] = if backward { &[q, k, v, o, q, k, v, o, lse] } else { &[o, lse, q, k, v] };
    // Inputs read at strides, as [batch, heads, rows, width]: which stride triple, and the shape.
    let strided = |i: usize| -> Option<(usize, [usize; 4])> {
        match (backward, i) {
            (false, 2) | (true, 4) => Some((0, [b, h, l, d])),
            (false, 3) | (true, 5) => Some((1, [b, hkv, n, d])),
            (false, 4) | (true, 6) => Some((2, [b, hkv, n, dv])),
            (true, 3) => Some((3, [b, h, l, dv])),
            (true, 7) => Some((4, [b, h, l, dv])),
            _ => None,
        }
    };
    let lse_at = if backward { 8 } else { 1 };
    if operands.len() != sizes.len() {
        return Err(invalid(format!("{} operands expected, got {}", sizes.len(), operands.len())));
    }
    let Some(dtype) = Dtype::from_code(operands[0].dtype) else { return Ok(false) };
    let mut slots = Vec::with_capacity(sizes.len());
    for (i, (t, &size)) in operands.iter().zip(sizes).enumerate() {
        let want = if i == lse_at { Dtype::Float } else { dtype };
        if !t.dtype_is(want) {
            return Ok(false);
        }
        if t.numel != size {
            return Err(invalid(format!("operand {i} has {} elements, {size} expected", t.numel)));
        }
        let extent = match strided(i) {
            // The last element the strides reach, plus one.
            Some((which, shape)) if size > 0 => {
                let st = &s.input_strides[which * 3..which * 3 + 3];
                if st.iter().any(|&v| v < 0) {
                    return Err(invalid(format!("negative strides {st:?}")));
                }
                shape[..3].iter().zip(st).map(|(&n, &st)| (n - 1) * st as usize).sum::<usize>() + shape[3]
            }
            _ => size,
        };
        slots.push((view(t.data, extent * want.size(), &[t.storage, t.storage_len])?, want));
    }
    let mask = if mask.data == 0 {
        None
    } else {
        let Some(mt) = Dtype::elementwise(mask.dtype).filter(|&m| m == Dtype::Bool || m == dtype) else { return Ok(false) };
        // The last element the strides reach, over [batch, heads, query_len, key_len].
        let extent = [b, h, l, n].iter().zip(s.mask_strides).map(|(&size, st)| size.saturating_sub(1) * st as usize).sum::<usize>() + 1;
        let empty = b * h * l * n == 0;
        Some((if empty { 0 } else { view(mask.data, extent * mt.size(), &[mask.storage, mask.storage_len])? }, mt))
    };
    if o == 0 && (!backward || k + v == 0) {
        return Ok(true);
    }
    let work = attention::Attention { shape, slots, mask };
    launch(device, q + k + v + o, move || work.run(backward))?;
    Ok(true)
}
