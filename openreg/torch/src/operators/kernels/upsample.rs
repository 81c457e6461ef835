//! 2-D resizing over contiguous `[planes, height, width]` operands: `upsample_nearest2d`,
//! `_upsample_nearest_exact2d` and `upsample_bilinear2d`, and their backwards. Each output
//! pixel's source pixels and weights are computed as CPU's kernels compute them
//! (`ATen/native/UpSample.h`): a nearest source is `floor(dst * scale)` with the scale in
//! float32, so that both pick the same pixel at every size; bilinear weights are float32 (the
//! opmath of float32, float16 and bfloat16), rounded to the element type for the 16-bit ones as
//! CPU stores them.

use half::{bf16, f16};
use openreg_runtime as rt;

use super::dtype::{Dtype, read, write};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, Resize, ResizeShape};

/// Launches a resize: `out` is the output (backward: the input-sized gradient), `input` the
/// input (backward: the output-sized gradient). False, having done nothing, for dtypes that
/// are not ours.
pub(crate) fn launch_resize(mode: Resize, shape: ResizeShape, out: Dense, input: Dense, device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{mode:?}: {what}")));
    if !matches!(mode, Resize::Nearest | Resize::NearestExact | Resize::Bilinear) {
        return Err(invalid("unknown mode".into()));
    }
    let (Some(dtype), Some(input_dtype)) = (Dtype::from_code(out.dtype), Dtype::from_code(input.dtype)) else {
        return Ok(false);
    };
    if dtype != input_dtype {
        return Ok(false);
    }
    let s = shape;
    let sizes_valid = s.planes >= 0 && s.input.iter().chain(&s.output).all(|&v| v >= 0);
    let volume = |hw: [i64; 2]| (s.planes as usize).checked_mul(hw[0] as usize)?.checked_mul(hw[1] as usize);
    let (true, Some(inputs), Some(outputs)) = (sizes_valid, volume(s.input), volume(s.output)) else {
        return Err(invalid(format!("invalid shape {s:?}")));
    };
    // An empty input with a non-empty output has no source pixel (the meta functions refuse it).
    if (inputs == 0) != (outputs == 0) {
        return Err(invalid(format!("an empty side and a non-empty one: {s:?}")));
    }
    let (written, read_elements) = if s.backward { (inputs, outputs) } else { (outputs, inputs) };
    if out.numel != written || input.numel != read_elements {
        return Err(invalid(format!("operands of {} and {} elements for {s:?}", out.numel, input.numel)));
    }
    if written == 0 {
        return Ok(true);
    }
    let work = Resizing {
        mode,
        shape: s,
        out: (view(out.data, written * dtype.size(), &[out.storage, out.storage_len])?, dtype),
        input: (view(input.data, read_elements * dtype.size(), &[input.storage, input.storage_len])?, dtype),
    };
    launch(device, inputs + outputs, move || work.run())?;
    Ok(true)
}

/// The source pixels of one output row or column, and their weights (nearest: `i1 == i0`,
/// `l1 == 0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tap {
    pub i0: usize,
    pub i1: usize,
    pub l0: f32,
    pub l1: f32,
}

// ANCHOR: taps
/// The taps of each of `output` positions along a dimension of `input` positions. `scale` is
/// the scale factor the caller gave (`scales_h` or `scales_w`), 0 when none was given.
/// `fused`: a bilinear source `scale * (o + 0.5) - 0.5` rounded once, as a fused multiply-add.
/// CPU's backward kernel is compiled that way and its forward is not; near 2048 one rounding
/// more moves a weight by 1e-4, so each pass follows CPU's.
pub(crate) fn taps(mode: Resize, input: usize, output: usize, scale: f64, align_corners: bool, dtype: Dtype, fused: bool) -> Vec<Tap> {
    let (i, n) = (input as i64, output as i64);
    // compute_scales_value<float>: 1 / the given factor, else input / output, in float32.
    let scale_value = if scale > 0.0 { (1.0 / scale) as f32 } else { i as f32 / n as f32 };
    let at = |src: i64| Tap { i0: src as usize, i1: src as usize, l0: 1.0, l1: 0.0 };
    (0..n)
        .map(|o| match mode {
            Resize::Nearest if n == i => at(o),
            Resize::Nearest if n == 2 * i => at(o >> 1),
            Resize::Nearest => at(((o as f32 * scale_value).floor() as i64).min(i - 1)),
            // (o + 0.5) is a double in C++, its product with the float scale too, and floorf
            // takes it back to float.
            Resize::NearestExact => at(((((o as f64 + 0.5) * f64::from(scale_value)) as f32).floor() as i64).min(i - 1)),
            _ if n == i => at(o),
            _ => {
                let ratio = match (align_corners, n > 1) {
                    (true, true) => (i - 1) as f32 / (n - 1) as f32,
                    (true, false) => 0.0,
                    (false, _) => scale_value,
                };
                let real = match (align_corners, fused) {
                    (true, _) => ratio * o as f32,
                    (false, true) => ratio.mul_add(o as f32 + 0.5, -0.5).max(0.0),
                    (false, false) => (ratio * (o as f32 + 0.5) - 0.5).max(0.0),
                };
                let i0 = (real.floor() as i64).min(i - 1);
                let l1 = round_to(dtype, (real - i0 as f32).clamp(0.0, 1.0));
                let i1 = i0 + i64::from(i0 < i - 1);
                Tap { i0: i0 as usize, i1: i1 as usize, l0: round_to(dtype, 1.0 - l1), l1 }
            }
        })
        .collect()
}
// ANCHOR_END: taps

/// `v` as CPU holds a weight of the element type: float16 and bfloat16 weights are rounded.
fn round_to(dtype: Dtype, v: f32) -> f32 {
    match dtype {
        Dtype::Half => f16::from_f32(v).to_f32(),
        Dtype::BFloat16 => bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

/// One launched resize: the runtime's views of its two operands.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Resizing {
    pub mode: Resize,
    pub shape: ResizeShape,
    pub out: (usize, Dtype),
    pub input: (usize, Dtype),
}

impl Resizing {
    pub(crate) fn run(&self) {
        let s = &self.shape;
        let planes = s.planes as usize;
        let [ih, iw] = s.input.map(|v| v as usize);
        let [oh, ow] = s.output.map(|v| v as usize);
        // Backward weights are opmath (float32) values, unrounded.
        let weights = if s.backward { Dtype::Float } else { self.out.1 };
        let rows = taps(self.mode, ih, oh, s.scales[0], s.align_corners, weights, s.backward);
        let cols = taps(self.mode, iw, ow, s.scales[1], s.align_corners, weights, s.backward);
        let nearest = self.mode != Resize::Bilinear;
        let (ip, op) = (ih * iw, oh * ow);
        if s.backward {
            // Planes are independent: each part accumulates whole planes of the gradient.
            let parts = thread_pool::threads().min((planes * (ip + op)).div_ceil(1 << 15)).min(planes).max(1);
            thread_pool::run(parts, |p| {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for plane in thread_pool::share(p, parts, planes) {
                    // SAFETY: one plane of each operand, disjoint per part; sizes checked at launch.
                    unsafe {
                        let g = read(self.input, plane * op, op, &mut a);
                        write(self.out, plane * ip, ip, &mut b, |gi| {
                            gi.fill(0.0);
                            for (r, t) in rows.iter().enumerate() {
                                for (c, q) in cols.iter().enumerate() {
                                    let v = g[r * ow + c];
                                    if nearest {
                                        gi[t.i0 * iw + q.i0] += v;
                                    } else {
                                        gi[t.i0 * iw + q.i0] += t.l0 * q.l0 * v;
                                        gi[t.i0 * iw + q.i1] += t.l0 * q.l1 * v;
                                        gi[t.i1 * iw + q.i0] += t.l1 * q.l0 * v;
                                        gi[t.i1 * iw + q.i1] += t.l1 * q.l1 * v;
                                    }
                                }
                            }
                        });
                    }
                }
            });
            return;
        }
        // Forward: output rows are independent, so a few large planes spread over the threads too.
        let units = planes * oh;
        let parts = thread_pool::threads().min((units * ow).div_ceil(1 << 15)).min(units).max(1);
        thread_pool::run(parts, |p| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mine = thread_pool::share(p, parts, units);
            let mut u = mine.start;
            while u < mine.end {
                let (plane, r0) = (u / oh, u % oh);
                let r1 = oh.min(r0 + (mine.end - u));
                // SAFETY: rows r0..r1 of one output plane, disjoint per part; its input plane is
                // only read. Sizes were checked at launch.
                unsafe {
                    let x = read(self.input, plane * ip, ip, &mut a);
                    write(self.out, plane * op + r0 * ow, (r1 - r0) * ow, &mut b, |y| {
                        for (k, t) in rows[r0..r1].iter().enumerate() {
                            let (top, bottom) = (&x[t.i0 * iw..][..iw], &x[t.i1 * iw..][..iw]);
                            let y = &mut y[k * ow..][..ow];
                            for (v, q) in y.iter_mut().zip(&cols) {
                                *v = if nearest {
                                    top[q.i0]
                                } else {
                                    // CPU's order: each row's pair first, then the rows.
                                    (top[q.i0] * q.l0 + top[q.i1] * q.l1) * t.l0 + (bottom[q.i0] * q.l0 + bottom[q.i1] * q.l1) * t.l1
                                };
                            }
                        }
                    });
                }
                u += r1 - r0;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_sources_follow_cpus_float_scale() {
        let src = |input, output, scale| -> Vec<usize> {
            taps(Resize::Nearest, input, output, scale, false, Dtype::Float, false).iter().map(|t| t.i0).collect()
        };
        assert_eq!(src(3, 3, 0.0), [0, 1, 2]);
        assert_eq!(src(3, 6, 0.0), [0, 0, 1, 1, 2, 2]);
        // 5 -> 3: floor(o * 5/3) = 0, 1, 3
        assert_eq!(src(5, 3, 0.0), [0, 1, 3]);
        // A given factor of 1.5 for 4 -> 6: floor(o / 1.5)
        assert_eq!(src(4, 6, 1.5), [0, 0, 1, 2, 2, 3]);
        let exact: Vec<usize> = taps(Resize::NearestExact, 5, 3, 0.0, false, Dtype::Float, false).iter().map(|t| t.i0).collect();
        // floor((o + 0.5) * 5/3) = 0, 2, 4
        assert_eq!(exact, [0, 2, 4]);
    }

    #[test]
    fn bilinear_weights_with_and_without_aligned_corners() {
        let t = taps(Resize::Bilinear, 2, 4, 0.0, false, Dtype::Float, false);
        // scale 0.5: sources max(0.5 * (o + 0.5) - 0.5, 0) = 0, 0.25, 0.75, 1.25 -> clamped to the last pixel
        assert_eq!(t[0], Tap { i0: 0, i1: 1, l0: 1.0, l1: 0.0 });
        assert_eq!(t[1], Tap { i0: 0, i1: 1, l0: 0.75, l1: 0.25 });
        assert_eq!(t[3], Tap { i0: 1, i1: 1, l0: 0.75, l1: 0.25 });
        let aligned = taps(Resize::Bilinear, 2, 3, 0.0, true, Dtype::Float, false);
        assert_eq!(aligned[1], Tap { i0: 0, i1: 1, l0: 0.5, l1: 0.5 });
        assert_eq!(aligned[2], Tap { i0: 1, i1: 1, l0: 1.0, l1: 0.0 });
    }
}
