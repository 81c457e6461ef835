//! The connectionist temporal classification loss (`_ctc_loss` and its backward), on host
//! copies of its operands, by the forward-backward recursion of Graves et al. (2006) in log
//! space, in CPU's order (aten/src/ATen/native/LossCTC.cpp). `log_probs` is `[time, batch,
//! classes]`; a sequence of `l` targets becomes the extended sequence `blank, t1, blank, t2, ..,
//! blank` of `2l + 1` symbols; `log_alpha` is `[batch, time, 2 * max_target + 1]`. It computes
//! in float32, as CPU does for float32 inputs, so that both round alike over long sequences.

use crate::ffi::ffi::LossArgs;

const NEG_INF: f32 = f32::NEG_INFINITY;

/// One sequence's view of the operands.
struct Sequence<'a> {
    args: &'a LossArgs,
    log_probs: &'a [f32],
    b: usize,
    targets: &'a [i64],
}

impl Sequence<'_> {
    /// `log_probs[t][b][c]`.
    fn lp(&self, t: usize, c: usize) -> f32 {
        let (batch, classes) = (self.args.batch as usize, self.args.classes as usize);
        self.log_probs[(t * batch + self.b) * classes + c]
    }

    /// Symbol `s` of the extended sequence.
    fn prime(&self, s: usize) -> usize {
        if s % 2 == 0 { self.args.blank as usize } else { self.targets[s / 2] as usize }
    }
}

/// log(exp(a) + exp(b) + exp(c)), shifted by the largest (0 when all are -inf), as CPU sums.
fn log_sum(a: f32, b: f32, c: f32) -> f32 {
    let max = a.max(b).max(c);
    let max = if max == NEG_INF { 0.0 } else { max };
    ((a - max).exp() + (b - max).exp() + (c - max).exp()).ln() + max
}

/// Each sequence's targets (a slice of `targets`), checked against the classes.
pub(crate) fn split_targets<'a>(args: &LossArgs, targets: &'a [i64], target_lengths: &[i64]) -> Result<Vec<&'a [i64]>, String> {
    let mut out = Vec::with_capacity(target_lengths.len());
    let mut offset = 0usize;
    for (b, &len) in target_lengths.iter().enumerate() {
        let len = len as usize;
        let start = if args.targets_2d { b * args.max_target as usize } else { offset };
        let sequence = targets.get(start..start + len).ok_or("ctc_loss: targets shorter than target_lengths")?;
        if let Some(&t) = sequence.iter().find(|&&t| t < 0 || t >= args.classes || t == args.blank) {
            return Err(format!("ctc_loss: target {t} is not a class other than the blank (classes: {}, blank: {})", args.classes, args.blank));
        }
        out.push(sequence);
        offset += len;
    }
    Ok(out)
}

/// `(neg_log_likelihood [batch], log_alpha)`.
pub(crate) fn forward(args: &LossArgs, log_probs: &[f32], targets: &[&[i64]], input_lengths: &[i64]) -> (Vec<f32>, Vec<f32>) {
    let (time, width) = (args.time as usize, 2 * args.max_target as usize + 1);
    let mut alpha = vec![NEG_INF; targets.len() * time * width];
    let mut nll = Vec::with_capacity(targets.len());
    for (b, (&targets, &input_length)) in targets.iter().zip(input_lengths).enumerate() {
        let seq = Sequence { args, log_probs, b, targets };
        let la = &mut alpha[b * time * width..(b + 1) * time * width];
        let (input_length, target_length) = (input_length as usize, targets.len());
        if input_length == 0 {
            nll.push(if target_length == 0 { 0.0 } else { f32::INFINITY });
            continue;
        }
        la[0] = seq.lp(0, args.blank as usize);
        if target_length > 0 {
            la[1] = seq.lp(0, seq.prime(1));
        }
        for t in 1..input_length {
            for s in 0..2 * target_length + 1 {
                let prev = &la[(t - 1) * width..t * width];
                let skip = s > 1 && seq.prime(s - 2) != seq.prime(s);
                let value = log_sum(prev[s], if s > 0 { prev[s - 1] } else { NEG_INF }, if skip { prev[s - 2] } else { NEG_INF });
                la[t * width + s] = value + seq.lp(t, seq.prime(s));
            }
        }
        let last = &la[(input_length - 1) * width..];
        let likelihood = if target_length == 0 {
            last[0]
        } else {
            log_sum(last[2 * target_length], last[2 * target_length - 1], NEG_INF)
        };
        nll.push(-likelihood);
    }
    (nll, alpha)
}

/// The gradient with respect to `log_probs` (`[time, batch, classes]`), given the forward's
/// results and the gradient of each sequence's loss.
pub(crate) fn backward(
    args: &LossArgs, grad_out: &[f32], log_probs: &[f32], targets: &[&[i64]], input_lengths: &[i64], nll: &[f32], alpha: &[f32],
) -> Vec<f32> {
    let (time, batch, classes, width) = (args.time as usize, args.batch as usize, args.classes as usize, 2 * args.max_target as usize + 1);
    let mut grad = vec![0.0; log_probs.len()];
    let mut beta = vec![NEG_INF; time * width];
    // Per time step, the log of the summed alpha * beta of the symbols that are class c.
    let mut summed = vec![NEG_INF; time * classes];
    for (b, (&targets, &input_length)) in targets.iter().zip(input_lengths).enumerate() {
        if args.zero_infinity && nll[b] == f32::INFINITY {
            continue; // a sequence that cannot be aligned: no gradient
        }
        let seq = Sequence { args, log_probs, b, targets };
        let la = &alpha[b * time * width..(b + 1) * time * width];
        let (input_length, target_length) = (input_length as usize, targets.len());
        beta.fill(NEG_INF);
        summed.fill(NEG_INF);
        let add = |summed: &mut [f32], t: usize, c: usize, value: f32| {
            let at = &mut summed[t * classes + c];
            *at = if *at == NEG_INF { value } else { log_sum(*at, value, NEG_INF) };
        };
        if input_length > 0 {
            // The last step: the final blank, and the last target if there is one.
            let t = input_length - 1;
            let first = if target_length > 0 { 2 * target_length - 1 } else { 0 };
            for s in first..=2 * target_length {
                beta[t * width + s] = seq.lp(t, seq.prime(s));
                add(&mut summed, t, seq.prime(s), la[t * width + s] + beta[t * width + s]);
            }
        }
        for t in (0..input_length.saturating_sub(1)).rev() {
            for s in (0..2 * target_length + 1).rev() {
                let next = &beta[(t + 1) * width..(t + 2) * width];
                let skip = s + 2 < 2 * target_length + 1 && seq.prime(s + 2) != seq.prime(s);
                let value = log_sum(next[s], if s < 2 * target_length { next[s + 1] } else { NEG_INF }, if skip { next[s + 2] } else { NEG_INF });
                beta[t * width + s] = value + seq.lp(t, seq.prime(s));
                add(&mut summed, t, seq.prime(s), la[t * width + s] + beta[t * width + s]);
            }
        }
        for t in 0..input_length {
            for c in 0..classes {
                let lp = seq.lp(t, c);
                grad[(t * batch + b) * classes + c] = (lp.exp() - (summed[t * classes + c] + nll[b] - lp).exp()) * grad_out[b];
            }
        }
    }
    grad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(time: i64, classes: i64, max_target: i64) -> LossArgs {
        LossArgs { batch: 1, classes, reduction: 0, p: 1, margin: 0.0, time, max_target, blank: 0, targets_2d: true, zero_infinity: false }
    }

    #[test]
    fn one_step_one_target_is_its_log_probability() {
        let lp = [0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()];
        let (nll, _) = forward(&args(1, 3, 1), &lp, &[&[2]], &[1]);
        assert!((nll[0] - 4f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn two_steps_sum_every_alignment() {
        // Alignments of "1" over 2 steps: (1,1), (0,1), (1,0): p = a*a + b*a + a*b with p(1)=a, p(0)=b.
        let (a, b) = (0.6f32, 0.4f32);
        let lp = [b.ln(), a.ln(), b.ln(), a.ln()];
        let (nll, alpha) = forward(&args(2, 2, 1), &lp, &[&[1]], &[2]);
        assert!((nll[0] + (a * a + 2.0 * a * b).ln()).abs() < 1e-6);
        // The gradient at a class is exp(lp) minus the posterior of the alignments using it.
        let grad = backward(&args(2, 2, 1), &[1.0], &lp, &[&[1]], &[2], &nll, &alpha);
        let z = a * a + 2.0 * a * b;
        assert!((grad[1] - (a - (a * a + a * b) / z)).abs() < 1e-6);
        assert!((grad[0] - (b - (a * b) / z)).abs() < 1e-6);
    }
}
