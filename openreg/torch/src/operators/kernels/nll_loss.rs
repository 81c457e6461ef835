//! The negative log-likelihood loss, forward and backward, over contiguous operands: `input`
//! is `[batch, classes]` (or `[classes]` with a 0-d target), `target` holds int64 class
//! indices. The sums run in float64.

use openreg_runtime as rt;

use super::dtype::{self, Dtype, INT64};
use super::{dense, launch, view};
use crate::error::Result;
use crate::ffi::ffi::{Dense, NllLoss};

// ANCHOR: nll_targets
/// The class indices of `target`, read on the stream and checked like CPU does: an invalid one
/// fails the task with CPU's `IndexError`, which the stream reports at its next synchronize (a
/// GPU's device-side assert). The host never waits for the values.
#[derive(Clone, Copy)]
struct Targets {
    at: usize,
    len: usize,
}

impl Targets {
    fn new(target: &Dense) -> Result<Self> {
        Ok(Targets { at: view(target.data, target.numel * 8, &[target.storage, target.storage_len])?, len: target.numel })
    }

    /// On the stream: the values, or `None` after failing the task on the first invalid one.
    fn read(&self, args: &NllLoss) -> Option<Vec<i64>> {
        let base = self.at as *const i64;
        // SAFETY: `len` int64 elements, checked against their allocation by `new`.
        let targets: Vec<i64> = (0..self.len).map(|i| unsafe { base.add(i).read_unaligned() }).collect();
        match invalid_target(args, &targets) {
            Some(t) => {
                rt::fail_task(rt::FailureClass::Index, format!("Target {t} is out of bounds."));
                None
            }
            None => Some(targets),
        }
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

/// `nll_loss_forward`: `output` and `total_weight` from `input` and `target` (`weight`'s
/// address is 0 when there is none), on the stream. False if the dtypes are not ours.
pub(crate) fn nll_loss_forward(
    args: NllLoss, output: Dense, total_weight: Dense, input: Dense, target: Dense, weight: Dense, device: i64,
) -> Result<bool> {
    let Some(dt) = nll_supported(&[&input, &output, &total_weight], &weight, &target) else { return Ok(false) };
    nll_shapes(&args, target.numel, &input, &output, &weight, &total_weight)?;
    let targets = Targets::new(&target)?;
    let (output, total_weight, input) = ((dense(&output, dt)?, dt), (dense(&total_weight, dt)?, dt), (dense(&input, dt)?, dt));
    let weight = if weight.data == 0 { None } else { Some((dense(&weight, dt)?, dt)) };
    launch(device, target.numel, move || {
        if let Some(targets) = targets.read(&args) {
            // SAFETY: every operand was checked against its allocation, targets against the classes.
            unsafe { forward(&args, output, total_weight, input, &targets, weight) }
        }
    })?;
    Ok(true)
}

/// `nll_loss_backward`: `grad_input` from `grad_output`, `target` and `total_weight`, on the stream.
pub(crate) fn nll_loss_backward(
    args: NllLoss, grad_input: Dense, grad_output: Dense, target: Dense, weight: Dense, total_weight: Dense, device: i64,
) -> Result<bool> {
    let Some(dt) = nll_supported(&[&grad_input, &grad_output, &total_weight], &weight, &target) else { return Ok(false) };
    nll_shapes(&args, target.numel, &grad_input, &grad_output, &weight, &total_weight)?;
    let targets = Targets::new(&target)?;
    let slot = |t: &Dense| -> Result<Slot> { Ok((dense(t, dt)?, dt)) };
    let elements = grad_input.numel;
    let (grad_input, grad_output, total_weight) = (slot(&grad_input)?, slot(&grad_output)?, slot(&total_weight)?);
    let weight = if weight.data == 0 { None } else { Some(slot(&weight)?) };
    launch(device, elements, move || {
        if let Some(targets) = targets.read(&args) {
            // SAFETY: as in nll_loss_forward.
            unsafe { backward(&args, grad_input, grad_output, &targets, weight, total_weight) }
        }
    })?;
    Ok(true)
}

/// `Reduction::Mean` in `at::Reduction` (0 is none, 2 is sum).
const MEAN: i64 = 1;

/// One operand: runtime-view address and dtype.
pub(crate) type Slot = (usize, Dtype);

/// The first target that is neither `ignore_index` nor a class, if any.
pub(crate) fn invalid_target(args: &NllLoss, target: &[i64]) -> Option<i64> {
    target.iter().copied().find(|&t| t != args.ignore_index && !(0..args.classes).contains(&t))
}

unsafe fn read(slot: Slot, i: usize) -> f64 {
    let mut v = [0f32];
    unsafe { dtype::load(slot.1, (slot.0 + i * slot.1.size()) as *const u8, 0, &mut v) };
    f64::from(v[0])
}

unsafe fn write(slot: Slot, i: usize, value: f64) {
    unsafe { dtype::store(slot.1, (slot.0 + i * slot.1.size()) as *mut u8, 0, &[value as f32]) };
}

/// `output` (per sample with reduction none and a batch, else one value) and `total_weight`.
///
/// # Safety
/// Operands must be valid for the sizes `args` gives; `target` must hold no invalid class.
pub(crate) unsafe fn forward(args: &NllLoss, output: Slot, total_weight: Slot, input: Slot, target: &[i64], weight: Option<Slot>) {
    let classes = args.classes as usize;
    let w = |t: usize| weight.map_or(1.0, |w| unsafe { read(w, t) });
    unsafe {
        write(total_weight, 0, 0.0);
        if args.per_sample {
            for (b, &t) in target.iter().enumerate() {
                let loss = if t == args.ignore_index { 0.0 } else { -read(input, b * classes + t as usize) * w(t as usize) };
                write(output, b, loss);
            }
            return;
        }
        let (mut loss, mut total) = (0f64, 0f64);
        for (b, &t) in target.iter().enumerate() {
            if t != args.ignore_index {
                loss -= read(input, b * classes + t as usize) * w(t as usize);
                total += w(t as usize);
            }
        }
        if target.is_empty() {
            // No samples: the mean of nothing is NaN, the sum 0 (as on CPU).
            loss = if args.reduction == MEAN { f64::NAN } else { 0.0 };
        } else if args.reduction == MEAN {
            loss /= total;
        }
        write(output, 0, loss);
        write(total_weight, 0, total);
    }
}

/// `grad_input`: zero except at each sample's target class.
///
/// # Safety
/// As for [`forward`]; `grad_input` has `batch * classes` elements.
pub(crate) unsafe fn backward(args: &NllLoss, grad_input: Slot, grad_output: Slot, target: &[i64], weight: Option<Slot>, total_weight: Slot) {
    let classes = args.classes as usize;
    let w = |t: usize| weight.map_or(1.0, |w| unsafe { read(w, t) });
    unsafe {
        // All-zero bits are 0.0 in every float dtype: no float32 buffer the gradient's size.
        let bytes = target.len() * classes * grad_input.1.size();
        super::elementwise::parallel_min(bytes, 1 << 18, |start, count| {
            std::ptr::write_bytes((grad_input.0 + start) as *mut u8, 0, count)
        });
        let per_sample = args.per_sample;
        // One upstream gradient for a reduced loss (divided by the weight total for a mean).
        let reduced = match (per_sample, args.reduction) {
            (true, _) => 0.0,
            (false, MEAN) => -read(grad_output, 0) / read(total_weight, 0),
            (false, _) => -read(grad_output, 0),
        };
        for (b, &t) in target.iter().enumerate() {
            if t != args.ignore_index {
                let g = if per_sample { -read(grad_output, b) } else { reduced };
                write(grad_input, b * classes + t as usize, w(t as usize) * g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: i64 = 0;

    fn args(reduction: i64, per_sample: bool) -> NllLoss {
        NllLoss { reduction, ignore_index: -100, classes: 3, per_sample }
    }

    #[test]
    fn mean_sum_and_per_sample_losses_with_weights_and_an_ignored_sample() {
        let input = [0.1f32, 0.2, 0.7, 0.5, 0.25, 0.25, 0.3, 0.3, 0.4];
        let target = [2i64, 0, -100];
        let weight = [1f32, 2.0, 3.0];
        let (mut out, mut total) = ([0f32; 3], [0f32]);
        let slot = |p: *const f32| (p as usize, Dtype::Float);
        unsafe {
            forward(&args(MEAN, false), slot(out.as_mut_ptr()), slot(total.as_mut_ptr()), slot(input.as_ptr()), &target, Some(slot(weight.as_ptr())));
        }
        // (0.7 * 3 + 0.5 * 1) / (3 + 1)
        assert!((out[0] + 0.65).abs() < 1e-6 && total[0] == 4.0);
        unsafe {
            forward(&args(NONE, true), slot(out.as_mut_ptr()), slot(total.as_mut_ptr()), slot(input.as_ptr()), &target, None);
        }
        assert_eq!(out, [-0.7, -0.5, 0.0]);

        let mut grad = [9f32; 9];
        let upstream = [2f32];
        let total = [4f32];
        unsafe {
            backward(&args(MEAN, false), slot(grad.as_mut_ptr()), slot(upstream.as_ptr()), &target, Some(slot(weight.as_ptr())), slot(total.as_ptr()));
        }
        assert_eq!(grad, [0.0, 0.0, -1.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn targets_outside_the_classes_are_found() {
        assert_eq!(invalid_target(&args(MEAN, true), &[0, 2, -100]), None);
        assert_eq!(invalid_target(&args(MEAN, true), &[0, 3]), Some(3));
        assert_eq!(invalid_target(&args(MEAN, true), &[-1]), Some(-1));
    }
}
