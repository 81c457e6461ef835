//! The margin losses and CTC: the launcher that checks their operands and runs the kernels of
//! `margin.rs` and `ctc.rs` on the stream. Like the NLL loss, the task reads the targets' values
//! and checks them; the host does not wait for the device.

use openreg_runtime as rt;

use super::ctc;
use super::dtype::{self, Dtype, INT32, INT64};
use super::margin;
use super::{dense, launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, Loss, LossArgs};

/// The values of a float operand (one of the kernels' dtypes), or of an int32/int64 one, as a
/// copy. Called on the stream.
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

/// A margin or CTC loss (`kernels/margin.rs`, `kernels/ctc.rs`), on the stream. Sizes are
/// checked at the call; the targets' values are read and checked by the task, and an invalid
/// one fails it with CPU's message, reported at the stream's next synchronize (like the NLL
/// loss). `operands` in [`Loss`]'s order, float operands of one dtype, targets int64 (CTC: or
/// int32). False if a dtype is not ours.
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
    check_sizes(op, &args, operands, lengths, targets)?;
    // Every operand inside its storage now: the task only reads and writes what was checked.
    for (k, t) in operands.iter().enumerate().filter(|(_, t)| t.data != 0 && t.numel != 0) {
        if k == targets {
            view(t.data, t.numel * if t.dtype == INT32 { 4 } else { 8 }, &[t.storage, t.storage_len])?;
        } else {
            dense(t, dt)?;
        }
    }
    let (operands, lengths) = (operands.to_vec(), lengths.to_vec());
    let elements = operands.iter().map(|t| t.numel).sum();
    launch(device, elements, move || {
        if let Err(failure) = compute(op, &args, &operands, &lengths, dt, targets) {
            rt::fail_task(rt::FailureClass::Runtime, failure.to_string());
        }
    })?;
    Ok(true)
}

/// The operands' element counts against the sizes the kernels index by, and CTC's lengths
/// (host values): errors at the call, never an access outside a tensor.
fn check_sizes(op: Loss, args: &LossArgs, operands: &[Dense], lengths: &[i64], targets: usize) -> Result<()> {
    let (classes, batch) = (args.classes.max(0) as usize, args.batch.max(0) as usize);
    let sized = |k: usize, n: usize, what: &str| -> Result<()> {
        if operands[k].numel != n {
            return Err(rt::Error::InvalidValue(format!("{op:?}: {what} of {} elements, {n} expected", operands[k].numel)).into());
        }
        Ok(())
    };
    let target = operands[targets].numel;
    match op {
        Loss::MultiMargin | Loss::MultiMarginBackward => {
            let first = if op == Loss::MultiMargin { 1 } else { 2 };
            sized(first, target * classes, "input")?;
            if operands[first + 2].data != 0 {
                sized(first + 2, classes, "weight")?;
            }
            if op == Loss::MultiMarginBackward {
                sized(0, target * classes, "grad_input")?;
            }
        }
        Loss::MultilabelMargin | Loss::MultilabelMarginBackward => {
            sized(2, target, "input")?;
            if op == Loss::MultilabelMargin {
                sized(1, target, "is_target")?;
            } else {
                sized(0, target, "grad_input")?;
            }
        }
        Loss::Ctc | Loss::CtcBackward => {
            let (input_lengths, target_lengths) = lengths.split_at(lengths.len().min(batch));
            sized(2, args.time.max(0) as usize * batch * classes, "log_probs")?;
            let valid = |l: &[i64], max: i64| l.len() == batch && l.iter().all(|&v| (0..=max).contains(&v));
            if !valid(input_lengths, args.time) || !valid(target_lengths, args.max_target) {
                return Err(rt::Error::InvalidValue(format!("{op:?}: lengths {lengths:?} outside the operands")).into());
            }
            let alpha_len = batch * args.time.max(0) as usize * (2 * args.max_target.max(0) as usize + 1);
            if op == Loss::Ctc {
                sized(0, batch, "neg_log_likelihood")?;
                sized(1, alpha_len, "log_alpha")?;
            } else {
                sized(1, batch, "grad_out")?;
                sized(4, batch, "neg_log_likelihood")?;
                sized(5, alpha_len, "log_alpha")?;
                sized(0, operands[2].numel, "grad")?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// On the stream: the loss from the operands' values (checked by `launch_loss`).
fn compute(op: Loss, args: &LossArgs, operands: &[Dense], lengths: &[i64], dt: Dtype, targets: usize) -> Result<()> {
    let f = |k: usize| host_floats(&operands[k], dt);
    let target = host_ints(&operands[targets])?;
    let error = Failure::runtime;
    match op {
        Loss::MultiMargin | Loss::MultiMarginBackward => {
            let first = if op == Loss::MultiMargin { 1 } else { 2 };
            let input = f(first)?;
            let weight = if operands[first + 2].data == 0 { None } else { Some(f(first + 2)?) };
            if op == Loss::MultiMargin {
                store_floats(&operands[0], dt, &margin::multi_margin(args, &input, &target, weight.as_deref()).map_err(error)?)?;
            } else {
                let grad = margin::multi_margin_backward(args, &f(1)?, &input, &target, weight.as_deref()).map_err(error)?;
                store_floats(&operands[0], dt, &grad)?;
            }
        }
        Loss::MultilabelMargin => {
            let (loss, is_target) = margin::multilabel_margin(args, &f(2)?, &target).map_err(error)?;
            store_floats(&operands[0], dt, &loss)?;
            store_floats(&operands[1], dt, &is_target)?;
        }
        Loss::MultilabelMarginBackward => {
            let grad = margin::multilabel_margin_backward(args, &f(1)?, &f(2)?, &target).map_err(error)?;
            store_floats(&operands[0], dt, &grad)?;
        }
        Loss::Ctc | Loss::CtcBackward => {
            let (input_lengths, target_lengths) = lengths.split_at(lengths.len().min(args.batch.max(0) as usize));
            let sequences = ctc::split_targets(args, &target, target_lengths).map_err(error)?;
            let single = |v: Vec<f64>| -> Vec<f32> { v.into_iter().map(|v| v as f32).collect() };
            let double = |v: Vec<f32>| -> Vec<f64> { v.into_iter().map(f64::from).collect() };
            let log_probs = single(f(2)?);
            if op == Loss::Ctc {
                let (nll, alpha) = ctc::forward(args, &log_probs, &sequences, input_lengths);
                store_floats(&operands[0], dt, &double(nll))?;
                store_floats(&operands[1], dt, &double(alpha))?;
            } else {
                let (grad_out, nll, alpha) = (f(1)?, f(4)?, f(5)?);
                let grad = ctc::backward(args, &single(grad_out), &log_probs, &sequences, input_lengths, &single(nll), &single(alpha));
                store_floats(&operands[0], dt, &double(grad))?;
            }
        }
        _ => {}
    }
    Ok(())
}
