//! Fused optimizer steps (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`: every parameter's
//! whole update in one pass over its memory) and GradScaler's two kernels. Values that live on
//! the device (the step count, the gradient scale, found_inf) are read when the kernel runs, on
//! the stream, as a GPU kernel would: the host never waits for them.

use openreg_runtime as rt;

use super::dtype::{Dtype, INT32, load, read, store, write};
use super::elementwise::BLOCK;
use super::{launch, view, dense};
use crate::error::Result;
use crate::ffi::ffi::{Dense, Fused, FusedArgs};

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
    let k = per_param(kind);
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
    let work = FusedStep { kind, args, slots, sizes, grad_scale, found_inf };
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
    let work = Unscale { grads: list, found_inf, inv_scale };
    launch(device, total, move || work.run())?;
    Ok(true)
}

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
    let work = UpdateScale { scale, growth_tracker: tracker, found_inf, growth: growth as f32, backoff: backoff as f32, interval };
    launch(device, 1, move || work.run())?;
    Ok(true)
}

/// An operand: runtime address (0: absent) and dtype.
pub(crate) type Slot = (usize, Dtype);

/// Operands per parameter: Adam's param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step;
/// SGD's param, grad, momentum_buffer.
pub(crate) fn per_param(kind: Fused) -> usize {
    if kind == Fused::Sgd { 3 } else { 6 }
}

/// One float32 value on the device.
///
/// # Safety
/// `slot` holds at least one element, checked at launch.
unsafe fn value(slot: Slot) -> f32 {
    unsafe { read(slot, 0, 1, &mut Vec::new())[0] }
}

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct FusedStep {
    pub kind: Fused,
    pub args: FusedArgs,
    /// `per_param(kind)` slots per parameter, and each parameter's element count.
    pub slots: Vec<Slot>,
    pub sizes: Vec<usize>,
    pub grad_scale: Slot,
    pub found_inf: Slot,
}

impl FusedStep {
    pub(crate) fn run(&self) {
        // SAFETY: every slot was checked at launch against its parameter's size.
        unsafe {
            if self.found_inf.0 != 0 && value(self.found_inf) != 0.0 {
                return; // GradScaler found an inf or NaN: this step is skipped
            }
            let inv_scale = if self.grad_scale.0 != 0 { 1.0 / value(self.grad_scale) } else { 1.0 };
            let k = per_param(self.kind);
            for (p, &n) in self.sizes.iter().enumerate() {
                let slots = &self.slots[p * k..(p + 1) * k];
                super::elementwise::parallel(n, |start, count| {
                    let mut bufs = vec![Vec::new(); k];
                    let mut done = 0;
                    while done < count {
                        let len = (count - done).min(BLOCK);
                        self.block(slots, start + done, len, inv_scale, &mut bufs);
                        done += len;
                    }
                });
            }
        }
    }

// ANCHOR: adam
    /// Elements `first..first + len` of one parameter.
    unsafe fn block(&self, slots: &[Slot], first: usize, len: usize, inv_scale: f32, bufs: &mut [Vec<f32>]) {
        let a = &self.args;
        let [lr, wd] = [a.lr as f32, a.weight_decay as f32];
        // Load every operand into float32 (an absent one reads as zeros); unscale the gradient.
        let values = bufs;
        for (k, &(ptr, dtype)) in slots.iter().enumerate() {
            let step = self.kind != Fused::Sgd && k == 5;
            let v = &mut values[k];
            v.resize(if step { 1 } else { len }, 0.0);
            match ptr {
                0 => v.fill(0.0),
                // SAFETY: inside the operand, checked at launch.
                _ if step => unsafe { load(dtype, ptr as *const u8, 0, v) },
                _ => unsafe { load(dtype, (ptr + first * dtype.size()) as *const u8, dtype.size() as isize, v) },
            }
        }
        for g in values[1].iter_mut() {
            *g *= if a.maximize { -inv_scale } else { inv_scale };
        }
        match self.kind {
            Fused::Sgd => {
                let [param, grad, buf] = &mut values[..] else { return };
                let momentum = a.momentum as f32;
                for i in 0..len {
                    let mut g = grad[i] + wd * param[i];
                    if momentum != 0.0 {
                        buf[i] = if a.first_step { g } else { momentum * buf[i] + (1.0 - a.dampening as f32) * g };
                        g = if a.nesterov { g + momentum * buf[i] } else { buf[i] };
                    }
                    param[i] -= lr * g;
                }
            }
            _ => {
                let [param, grad, exp_avg, exp_avg_sq, max_sq, step] = &mut values[..] else { return };
                let (beta1, beta2, eps) = (a.beta1 as f32, a.beta2 as f32, a.eps as f32);
                let t = step[0];
                let step_size = lr / (1.0 - beta1.powf(t));
                let correction2_sqrt = (1.0 - beta2.powf(t)).sqrt();
                for i in 0..len {
                    let mut g = grad[i];
                    if self.kind == Fused::AdamW {
                        param[i] -= lr * wd * param[i]; // decoupled weight decay
                    } else {
                        g += wd * param[i];
                    }
                    exp_avg[i] += (g - exp_avg[i]) * (1.0 - beta1);
                    exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1.0 - beta2) * g * g;
                    let second = if a.amsgrad {
                        max_sq[i] = max_sq[i].max(exp_avg_sq[i]);
                        max_sq[i]
                    } else {
                        exp_avg_sq[i]
                    };
                    param[i] -= step_size * exp_avg[i] / (second.sqrt() / correction2_sqrt + eps);
                }
            }
        }
        // Store what the step changed (not the gradient, not the step count).
        let written: &[usize] = match self.kind {
            Fused::Sgd if a.momentum != 0.0 => &[0, 2],
            Fused::Sgd => &[0],
            _ if a.amsgrad => &[0, 2, 3, 4],
            _ => &[0, 2, 3],
        };
        for &k in written {
            let (ptr, dtype) = slots[k];
            // SAFETY: as above.
            unsafe { store(dtype, (ptr + first * dtype.size()) as *mut u8, dtype.size() as isize, &values[k]) };
        }
    }
// ANCHOR_END: adam
}

/// GradScaler's `_amp_foreach_non_finite_check_and_unscale_`: multiplies each gradient by
/// `inv_scale` and sets `found_inf` to 1 if any value is an inf or a NaN.
#[derive(Clone)]
pub(crate) struct Unscale {
    pub grads: Vec<(Slot, usize)>,
    pub found_inf: Slot,
    pub inv_scale: Slot,
}

impl Unscale {
    pub(crate) fn run(&self) {
        // SAFETY: slots checked at launch; parts write disjoint ranges.
        unsafe {
            let inv = value(self.inv_scale);
            let found = std::sync::atomic::AtomicBool::new(false);
            for &(slot, n) in &self.grads {
                super::elementwise::parallel(n, |start, count| {
                    let (mut src, mut dst) = (Vec::new(), Vec::new());
                    let mut done = 0;
                    while done < count {
                        let len = (count - done).min(BLOCK);
                        let g = read(slot, start + done, len, &mut src).to_vec();
                        if g.iter().any(|v| !v.is_finite()) {
                            found.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        write(slot, start + done, len, &mut dst, |d| {
                            for (d, v) in d.iter_mut().zip(g) {
                                *d = v * inv;
                            }
                        });
                        done += len;
                    }
                });
            }
            if found.into_inner() {
                write(self.found_inf, 0, 1, &mut Vec::new(), |v| v[0] = 1.0);
            }
        }
    }
}

/// GradScaler's `_amp_update_scale_`: back off after an inf, grow after `interval` clean steps.
#[derive(Clone)]
pub(crate) struct UpdateScale {
    pub scale: Slot,
    /// An int32 counter.
    pub growth_tracker: usize,
    pub found_inf: Slot,
    pub growth: f32,
    pub backoff: f32,
    pub interval: i32,
}

impl UpdateScale {
    pub(crate) fn run(&self) {
        // SAFETY: one element each, checked at launch.
        unsafe {
            let tracker = self.growth_tracker as *mut i32;
            let scale = value(self.scale);
            let (new_scale, count) = if value(self.found_inf) != 0.0 {
                (scale * self.backoff, 0)
            } else if tracker.read_unaligned() + 1 == self.interval {
                let grown = scale * self.growth;
                (if grown.is_finite() { grown } else { scale }, 0)
            } else {
                (scale, tracker.read_unaligned() + 1)
            };
            write(self.scale, 0, 1, &mut Vec::new(), |v| v[0] = new_scale);
            tracker.write_unaligned(count);
        }
    }
}
