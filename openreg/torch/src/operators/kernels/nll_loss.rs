//! The negative log-likelihood loss, forward and backward, over contiguous operands: `input`
//! is `[batch, classes]` (or `[classes]` with a 0-d target), `target` holds int64 class
//! indices. The sums run in float64.

use super::dtype::{self, Dtype};
use crate::ffi::ffi::NllLoss;

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
        let zeros = vec![0f32; target.len() * classes];
        dtype::store(grad_input.1, grad_input.0 as *mut u8, grad_input.1.size() as isize, &zeros);
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
