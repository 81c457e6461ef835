//! The multi-class margin losses, forward and backward, on host copies of their operands:
//! `multi_margin_loss` (one target class per sample) and `multilabel_margin_loss` (a list of
//! target classes per sample, ended by -1). Samples are rows of `classes` values; the sums and
//! loop order are CPU's (aten/src/ATen/native/LossMultiMargin.cpp, LossMultiLabelMargin.cpp).

use crate::ffi::ffi::LossArgs;

/// `at::Reduction`: 0 none, 1 mean, 2 sum.
const NONE: i64 = 0;
const MEAN: i64 = 1;

/// Each sample's hinge terms `max(0, margin - x[y] + x[d])^p` over `d != y`, weighted by
/// `weight[y]`, divided by the classes; then reduced. Err: a target outside the classes.
pub(crate) fn multi_margin(args: &LossArgs, input: &[f64], target: &[i64], weight: Option<&[f64]>) -> Result<Vec<f64>, String> {
    let classes = args.classes as usize;
    let mut losses = Vec::with_capacity(target.len());
    for (row, &y) in input.chunks_exact(classes).zip(target) {
        let y = usize::try_from(y).ok().filter(|&y| y < classes).ok_or("target out of range")?;
        let w = weight.map_or(1.0, |w| w[y]);
        let mut sum = 0.0;
        for (d, &x) in row.iter().enumerate() {
            let z = args.margin - row[y] + x;
            if d != y && z > 0.0 {
                sum += if args.p == 1 { z } else { z * z } * w;
            }
        }
        losses.push(sum / classes as f64);
    }
    Ok(reduce(args, losses))
}

/// The gradient of [`multi_margin`] with respect to the input, scaled by `grad_output` (one
/// value per sample with reduction none, else one value).
pub(crate) fn multi_margin_backward(
    args: &LossArgs, grad_output: &[f64], input: &[f64], target: &[i64], weight: Option<&[f64]>,
) -> Result<Vec<f64>, String> {
    let classes = args.classes as usize;
    let samples = target.len();
    let g = if args.reduction == MEAN { 1.0 / (samples * classes) as f64 } else { 1.0 / classes as f64 };
    let mut grad = vec![0.0; input.len()];
    for (i, ((row, out), &y)) in input.chunks_exact(classes).zip(grad.chunks_exact_mut(classes)).zip(target).enumerate() {
        let y = usize::try_from(y).ok().filter(|&y| y < classes).ok_or("target out of range")?;
        let w = weight.map_or(1.0, |w| w[y]);
        let mut at_target = 0.0;
        for (d, &x) in row.iter().enumerate() {
            let z = args.margin - row[y] + x;
            if d != y && z > 0.0 {
                let h = if args.p == 1 { g } else { 2.0 * g * z } * w;
                at_target -= h;
                out[d] = h;
            }
        }
        out[y] = at_target;
        let scale = if args.reduction == NONE && grad_output.len() == samples { grad_output[i] } else { grad_output[0] };
        out.iter_mut().for_each(|v| *v *= scale);
    }
    Ok(grad)
}

/// The classes each sample lists before its first -1, as 0/1 per class (the `is_target`
/// output). Err: a target outside -1..classes, anywhere in the row.
fn listed(classes: usize, target: &[i64]) -> Result<(Vec<usize>, Vec<f64>), String> {
    if target.iter().any(|&t| !(-1..classes as i64).contains(&t)) {
        return Err("argument #2 'target' is out of range".into());
    }
    let labels: Vec<usize> = target.iter().take_while(|&&t| t >= 0).map(|&t| t as usize).collect();
    let mut is_target = vec![0.0; classes];
    labels.iter().for_each(|&t| is_target[t] = 1.0);
    Ok((labels, is_target))
}

/// `multilabel_margin_loss_forward`: the loss and `is_target`. Each sample sums
/// `max(0, 1 - x[j] + x[k])` over its listed classes `j` and unlisted classes `k`, divided by
/// the classes.
pub(crate) fn multilabel_margin(args: &LossArgs, input: &[f64], target: &[i64]) -> Result<(Vec<f64>, Vec<f64>), String> {
    let classes = args.classes as usize;
    let (mut losses, mut is_target) = (Vec::new(), Vec::with_capacity(input.len()));
    for (row, target) in input.chunks_exact(classes).zip(target.chunks_exact(classes)) {
        let (labels, listed) = listed(classes, target)?;
        let mut sum = 0.0;
        for &j in &labels {
            for (k, &x) in row.iter().enumerate() {
                let z = 1.0 - row[j] + x;
                if listed[k] == 0.0 && z > 0.0 {
                    sum += z;
                }
            }
        }
        losses.push(sum / classes as f64);
        is_target.extend(listed);
    }
    Ok((reduce(args, losses), is_target))
}

/// The gradient of [`multilabel_margin`] with respect to the input.
pub(crate) fn multilabel_margin_backward(args: &LossArgs, grad_output: &[f64], input: &[f64], target: &[i64]) -> Result<Vec<f64>, String> {
    let classes = args.classes as usize;
    let samples = input.len() / classes.max(1);
    let g = if args.reduction == MEAN { 1.0 / (samples * classes) as f64 } else { 1.0 / classes as f64 };
    let mut grad = vec![0.0; input.len()];
    for (i, ((row, target), out)) in input.chunks_exact(classes).zip(target.chunks_exact(classes)).zip(grad.chunks_exact_mut(classes)).enumerate() {
        let (labels, listed) = listed(classes, target)?;
        for &j in &labels {
            for (k, &x) in row.iter().enumerate() {
                if listed[k] == 0.0 && 1.0 - row[j] + x > 0.0 {
                    out[j] -= g;
                    out[k] += g;
                }
            }
        }
        let scale = if args.reduction == NONE && grad_output.len() == samples { grad_output[i] } else { grad_output[0] };
        out.iter_mut().for_each(|v| *v *= scale);
    }
    Ok(grad)
}

/// Per-sample losses reduced as `args.reduction` says (none keeps them).
fn reduce(args: &LossArgs, losses: Vec<f64>) -> Vec<f64> {
    if args.reduction == NONE {
        return losses;
    }
    let total: f64 = losses.iter().sum();
    vec![if args.reduction == MEAN { total / losses.len() as f64 } else { total }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(reduction: i64, p: i64) -> LossArgs {
        LossArgs { batch: 2, classes: 3, reduction, p, margin: 1.0, time: 0, max_target: 0, blank: 0, targets_2d: false, zero_infinity: false }
    }

    #[test]
    fn multi_margin_matches_the_formula_and_its_gradient() {
        let x = [0.1, 0.2, 0.4, 0.8, 0.0, -0.5];
        // sample 0, y = 2: (1 - 0.4 + 0.1) + (1 - 0.4 + 0.2) = 1.5; sample 1, y = 0: 0.2 + 0 = 0.2
        let loss = multi_margin(&args(NONE, 1), &x, &[2, 0], None).unwrap();
        assert!((loss[0] - 1.5 / 3.0).abs() < 1e-12 && (loss[1] - 0.2 / 3.0).abs() < 1e-12);
        let grad = multi_margin_backward(&args(NONE, 1), &[1.0, 1.0], &x, &[2, 0], None).unwrap();
        let third = 1.0 / 3.0;
        assert_eq!(grad, vec![third, third, -2.0 * third, -third, third, 0.0]);
        assert!(multi_margin(&args(MEAN, 1), &x, &[3, 0], None).is_err());
    }

    #[test]
    fn multilabel_margin_stops_at_minus_one_and_rejects_targets_out_of_range() {
        let x = [0.1, 0.2, 0.4, 0.8, 0.0, -0.5];
        let (loss, is_target) = multilabel_margin(&args(NONE, 1), &x, &[2, -1, 0, 0, 1, -1]).unwrap();
        assert_eq!(is_target, vec![0.0, 0.0, 1.0, 1.0, 1.0, 0.0]);
        // sample 0, j = 2, k in {0, 1}: 0.7 + 0.8; sample 1, j in {0, 1}, k = 2: 0 + 0.5
        assert!((loss[0] - 1.5 / 3.0).abs() < 1e-12 && (loss[1] - 0.5 / 3.0).abs() < 1e-12);
        assert!(multilabel_margin(&args(NONE, 1), &x, &[2, -1, -2, 0, 1, -1]).is_err());
    }
}
