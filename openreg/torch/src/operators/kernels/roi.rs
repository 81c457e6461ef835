//! torchvision's region-of-interest operators over contiguous `[batch, channels, height,
//! width]` feature maps and `[K, 5]` boxes `(batch index, x1, y1, x2, y2)`: `roi_align`,
//! `roi_pool` and their position-sensitive forms `ps_roi_align` and `ps_roi_pool`, forward and
//! backward. The geometry (where a box's bins start, how many samples a bin takes, which pixels
//! a sample reads) follows torchvision's CPU kernels, in float32 as they compute for float32.
//!
//! A box's batch index is data on the device, so it is checked where it is read, in the
//! kernel: a bad one is reported the way a GPU reports a device-side assert, as an error of
//! the stream at its next synchronize (`IndexError`), and the box contributes nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use openreg_runtime as rt;

use super::dtype::{Dtype, INT32, read, write};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, RoiOp, RoiShape};

/// Launches a forward (operands: output, mapping | input, boxes) or a backward (grad_input |
/// mapping, grad, boxes). `mapping` is roi_pool's argmax and the position-sensitive operators'
/// channel mapping (int32, as torchvision's); roi_align has none and only roi_pool's backward
/// reads it. False, having done nothing, for dtypes that are not ours.
pub(crate) fn launch_roi(op: RoiOp, backward: bool, shape: RoiShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("{op:?}: {what}")));
    let [first, mapping, source, boxes] = operands else {
        return Err(invalid(format!("4 operands expected, got {}", operands.len())));
    };
    let Some(geometry) = Geometry::new(op, &shape) else {
        return Err(invalid(format!("invalid shape {shape:?}")));
    };
    let Some(dtype) = Dtype::from_code(first.dtype) else {
        return Ok(false);
    };
    if !matches!(dtype, Dtype::Float | Dtype::Half) || source.dtype != first.dtype || boxes.dtype != first.dtype {
        return Ok(false);
    }
    let g = &geometry;
    let (outputs, inputs) = (g.rois * g.out_channels * g.bins, g.batch * g.channels * g.plane);
    let (written, read_elements) = if backward { (inputs, outputs) } else { (outputs, inputs) };
    let mapped = if backward { op == RoiOp::Pool } else { op != RoiOp::Align };
    if first.numel != written || source.numel != read_elements || boxes.numel != g.rois * 5 {
        return Err(invalid(format!("operands of {}, {} and {} elements for {shape:?}", first.numel, source.numel, boxes.numel)));
    }
    if mapped && (mapping.dtype != INT32 || mapping.numel != outputs) {
        return Err(invalid(format!("an int32 mapping of {outputs} elements expected, got {} of dtype code {}", mapping.numel, mapping.dtype)));
    }
    if written == 0 {
        return Ok(true);
    }
    let slot = |t: &Dense, size: usize| view(t.data, t.numel * size, &[t.storage, t.storage_len]);
    let work = Roi {
        op,
        backward,
        geometry,
        first: (slot(first, dtype.size())?, dtype),
        mapping: if mapped { slot(mapping, 4)? } else { 0 },
        source: (slot(source, dtype.size())?, dtype),
        boxes: (slot(boxes, dtype.size())?, dtype),
    };
    launch(device, inputs + outputs, move || work.run())?;
    Ok(true)
}

/// The sizes of one call, checked and in `usize`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    rois: usize,
    batch: usize,
    channels: usize,
    /// Output channels: `channels`, or `channels / bins` for the position-sensitive operators.
    out_channels: usize,
    height: usize,
    width: usize,
    plane: usize,
    pooled: [usize; 2],
    bins: usize,
    scale: f32,
    sampling_ratio: i32,
    aligned: bool,
}

impl Geometry {
    fn new(op: RoiOp, s: &RoiShape) -> Option<Geometry> {
        let u = |v: i64| usize::try_from(v).ok().filter(|&v| v <= i32::MAX as usize);
        let (rois, batch, channels, height, width) = (u(s.rois)?, u(s.batch)?, u(s.channels)?, u(s.height)?, u(s.width)?);
        let pooled = [u(s.pooled[0])?, u(s.pooled[1])?];
        let bins = pooled[0].checked_mul(pooled[1])?;
        if bins == 0 {
            return None;
        }
        let sensitive = matches!(op, RoiOp::PsAlign | RoiOp::PsPool);
        if sensitive && channels % bins != 0 {
            return None;
        }
        let out_channels = if sensitive { channels / bins } else { channels };
        let plane = height.checked_mul(width)?;
        rois.checked_mul(channels)?.checked_mul(bins.max(1))?;
        batch.checked_mul(channels)?.checked_mul(plane)?;
        let sampling_ratio = i32::try_from(s.sampling_ratio).ok()?;
        Some(Geometry { rois, batch, channels, out_channels, height, width, plane, pooled, bins, scale: s.spatial_scale as f32, sampling_ratio, aligned: s.aligned })
    }
}

/// One launched operator: the runtime's views of its operands, in `launch_roi`'s order.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Roi {
    op: RoiOp,
    backward: bool,
    geometry: Geometry,
    first: (usize, Dtype),
    mapping: usize,
    source: (usize, Dtype),
    boxes: (usize, Dtype),
}

/// A box in feature-map coordinates, as each operator computes it.
#[derive(Debug, Clone, Copy)]
struct Box {
    batch: usize,
    start: [f32; 2],
    size: [f32; 2],
    bin: [f32; 2],
}

/// One bilinear sample: the four pixels it reads and their weights (all zero outside the map).
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: [usize; 4],
    w: [f32; 4],
    inside: bool,
}

/// The sample at `(y, x)`: a point up to one pixel outside the map reads the edge, further out
/// nothing. Written as "not inside" so that a NaN coordinate lands outside too.
fn sample(height: usize, width: usize, y: f32, x: f32) -> Sample {
    let (h, w) = (height as f32, width as f32);
    if !(y >= -1.0 && y <= h && x >= -1.0 && x <= w) {
        return Sample::default();
    }
    // Along one axis: the two pixels around `v` (both the last one past the edge) and the
    // distance from the first.
    let axis = |v: f32, size: usize| {
        let low = v.max(0.0) as usize;
        if low >= size - 1 { (size - 1, size - 1, 0.0) } else { (low, low + 1, v.max(0.0) - low as f32) }
    };
    let (y_low, y_high, ly) = axis(y, height);
    let (x_low, x_high, lx) = axis(x, width);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        at: [y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high],
        w: [hy * hx, hy * lx, ly * hx, ly * lx],
        inside: true,
    }
}

impl Sample {
    /// The interpolated value, summed in torchvision's order.
    fn value(&self, plane: &[f32]) -> f32 {
        let [a, b, c, d] = self.at;
        self.w[0] * plane[a] + self.w[1] * plane[b] + self.w[2] * plane[c] + self.w[3] * plane[d]
    }
}

impl Geometry {
    // ANCHOR: box_check
    /// Box `n` of `boxes`, or `None` if its batch index is not one of the batch's.
    fn locate(&self, op: RoiOp, boxes: &[f32], n: usize) -> Option<Box> {
        let r = &boxes[n * 5..][..5];
        let batch = r[0] as i64; // C++'s conversion: toward zero
        if !(r[0].is_finite() && (0..self.batch as i64).contains(&batch)) {
            return None;
        }
        // ANCHOR_END: box_check
        let [ph, pw] = self.pooled.map(|v| v as f32);
        let (start, size) = match op {
            RoiOp::Align | RoiOp::PsAlign => {
                // Not rounded: the sub-pixel start is the point of roi_align.
                let offset = if self.aligned || op == RoiOp::PsAlign { 0.5 } else { 0.0 };
                let start = [r[2] * self.scale - offset, r[1] * self.scale - offset];
                let end = [r[4] * self.scale - offset, r[3] * self.scale - offset];
                let mut size = [end[0] - start[0], end[1] - start[1]];
                if op == RoiOp::Align && !self.aligned {
                    size = size.map(|v| v.max(1.0)); // a malformed box becomes 1x1
                }
                (start, size)
            }
            RoiOp::Pool | RoiOp::PsPool => {
                let start = [(r[2] * self.scale).round(), (r[1] * self.scale).round()];
                let end = [(r[4] * self.scale).round(), (r[3] * self.scale).round()];
                // roi_pool counts both end pixels, ps_roi_pool one; both at least 1.
                let extra = if op == RoiOp::Pool { 1 } else { 0 };
                let size = [0, 1].map(|d| ((end[d] as i32) - (start[d] as i32) + extra).max(1) as f32);
                (start, size)
            }
            _ => unreachable!("checked at launch"),
        };
        Some(Box { batch: batch as usize, start, size, bin: [size[0] / ph, size[1] / pw] })
    }

    /// The sampling grid of a bin of `b` (`sampling_ratio`, or as many samples as the bin
    /// has pixels) and the count the sum is divided by.
    fn grid(&self, b: &Box) -> ([i32; 2], f32) {
        let [ph, pw] = self.pooled.map(|v| v as f32);
        let grid = if self.sampling_ratio > 0 {
            [self.sampling_ratio; 2]
        } else {
            [(b.size[0] / ph).ceil() as i32, (b.size[1] / pw).ceil() as i32]
        };
        (grid, (grid[0] * grid[1]) as f32)
    }

    /// The samples of bin `(ph, pw)` of `b`, row by row.
    fn samples(&self, b: &Box, grid: [i32; 2], ph: usize, pw: usize, out: &mut Vec<Sample>) {
        out.clear();
        let y0 = b.start[0] + ph as f32 * b.bin[0];
        let x0 = b.start[1] + pw as f32 * b.bin[1];
        for iy in 0..grid[0].max(0) {
            let y = y0 + (iy as f32 + 0.5) * b.bin[0] / grid[0] as f32;
            for ix in 0..grid[1].max(0) {
                let x = x0 + (ix as f32 + 0.5) * b.bin[1] / grid[1] as f32;
                out.push(sample(self.height, self.width, y, x));
            }
        }
    }

    /// The pixel rectangle `[h0, h1) x [w0, w1)` of bin `(ph, pw)` of a pooling box, clipped
    /// to `limit` (roi_pool and ps_roi_pool's backward clip to the size, ps_roi_pool's forward
    /// to the size less one, as torchvision's CPU kernels do).
    fn rectangle(&self, b: &Box, ph: usize, pw: usize, limit: [i32; 2]) -> [i32; 4] {
        let span = |p: usize, bin: f32, start: f32, limit: i32| {
            let lo = (p as f32 * bin).floor() as i32 + start as i32;
            let hi = ((p + 1) as f32 * bin).ceil() as i32 + start as i32;
            (lo.clamp(0, limit), hi.clamp(0, limit))
        };
        let (h0, h1) = span(ph, b.bin[0], b.start[0], limit[0]);
        let (w0, w1) = span(pw, b.bin[1], b.start[1], limit[1]);
        [h0, h1, w0, w1]
    }

    /// The input channel a position-sensitive output reads: one per (channel, bin).
    fn sensitive_channel(&self, out_channel: usize, ph: usize, pw: usize) -> usize {
        (out_channel * self.pooled[0] + ph) * self.pooled[1] + pw
    }
}

impl Roi {
    pub(crate) fn run(&self) {
        let g = self.geometry;
        let mut scratch = Vec::new();
        // SAFETY: the launch checked every operand's size.
        let boxes = unsafe { read(self.boxes, 0, g.rois * 5, &mut scratch) };
        let located: Vec<Option<Box>> = (0..g.rois).map(|n| g.locate(self.op, boxes, n)).collect();
        let bad_argmax = AtomicBool::new(false);
        if self.backward { self.run_backward(&located, &bad_argmax) } else { self.run_forward(&located) }
        // Reported from the stream's thread (the parts run on the pool's): the stream raises
        // it at its next synchronize.
        if let Some(n) = located.iter().position(Option::is_none) {
            let text = format!("box {n} has batch index {}, outside [0, {})", boxes[n * 5], g.batch);
            rt::fail_task(rt::FailureClass::Index, text);
        } else if bad_argmax.load(Ordering::Relaxed) {
            rt::fail_task(rt::FailureClass::Index, format!("an argmax outside a plane of {} pixels", g.plane));
        }
    }

    fn run_forward(&self, located: &[Option<Box>]) {
        let g = self.geometry;
        let units = g.rois * g.out_channels; // one unit: a box's bins of one output channel
        let per_unit = g.bins * if matches!(self.op, RoiOp::Pool | RoiOp::PsPool) { g.plane } else { 16 };
        let parts = thread_pool::threads().min((units * per_unit).div_ceil(1 << 15)).min(units).max(1);
        thread_pool::run(parts, |p| {
            let (mut plane, mut out, mut samples) = (Vec::new(), Vec::new(), Vec::new());
            for unit in thread_pool::share(p, parts, units) {
                let (n, c) = (unit / g.out_channels, unit % g.out_channels);
                // SAFETY: every operand was checked at launch; this part writes only its units.
                unsafe {
                    write(self.first, unit * g.bins, g.bins, &mut out, |y| match located[n] {
                        None => {
                            y.fill(0.0);
                            if self.mapping != 0 {
                                // A reported box pools nothing: no pixel to send a gradient to.
                                std::slice::from_raw_parts_mut((self.mapping as *mut i32).add(unit * g.bins), g.bins).fill(-1);
                            }
                        }
                        Some(b) => self.forward_unit(&b, c, y, &mut plane, &mut samples, unit),
                    });
                }
            }
        });
    }

    /// The bins of box `b` for output channel `c` into `y`; the mapping, if any, at `unit`.
    ///
    /// # Safety
    /// The launch checked the operands; `unit`'s mapping entries are this part's.
    unsafe fn forward_unit(&self, b: &Box, c: usize, y: &mut [f32], plane: &mut Vec<f32>, samples: &mut Vec<Sample>, unit: usize) {
        let g = self.geometry;
        let (_, pooled_w) = (g.pooled[0], g.pooled[1]);
        let mapping = (self.mapping as *mut i32).wrapping_add(unit * g.bins);
        let input_plane = |ch: usize, buffer: &mut Vec<f32>| -> *const f32 {
            unsafe { read(self.source, (b.batch * g.channels + ch) * g.plane, g.plane, buffer).as_ptr() }
        };
        match self.op {
            RoiOp::Align => {
                let x = unsafe { std::slice::from_raw_parts(input_plane(c, plane), g.plane) };
                let (grid, count) = g.grid(b);
                for (k, v) in y.iter_mut().enumerate() {
                    g.samples(b, grid, k / pooled_w, k % pooled_w, samples);
                    let sum = samples.iter().fold(0.0f32, |acc, s| acc + s.value(x));
                    *v = sum / count.max(1.0);
                }
            }
            RoiOp::PsAlign => {
                let (grid, count) = g.grid(b);
                for (k, v) in y.iter_mut().enumerate() {
                    let (ph, pw) = (k / pooled_w, k % pooled_w);
                    let ch = g.sensitive_channel(c, ph, pw);
                    let x = unsafe { std::slice::from_raw_parts(input_plane(ch, plane), g.plane) };
                    g.samples(b, grid, ph, pw, samples);
                    // A bin with no sample divides zero by zero, as torchvision does.
                    *v = samples.iter().fold(0.0f32, |acc, s| acc + s.value(x)) / count;
                    unsafe { *mapping.add(k) = ch as i32 };
                }
            }
            RoiOp::Pool => {
                let x = unsafe { std::slice::from_raw_parts(input_plane(c, plane), g.plane) };
                let limit = [g.height as i32, g.width as i32];
                for (k, v) in y.iter_mut().enumerate() {
                    let [h0, h1, w0, w1] = g.rectangle(b, k / pooled_w, k % pooled_w, limit);
                    let empty = h1 <= h0 || w1 <= w0;
                    let (mut best, mut at) = (if empty { 0.0 } else { f32::MIN }, -1i32);
                    for h in h0..h1 {
                        for w in w0..w1 {
                            let i = h as usize * g.width + w as usize;
                            if x[i] > best {
                                (best, at) = (x[i], i as i32);
                            }
                        }
                    }
                    *v = best;
                    unsafe { *mapping.add(k) = at };
                }
            }
            RoiOp::PsPool => {
                let limit = [g.height as i32 - 1, g.width as i32 - 1];
                for (k, v) in y.iter_mut().enumerate() {
                    let (ph, pw) = (k / pooled_w, k % pooled_w);
                    let ch = g.sensitive_channel(c, ph, pw);
                    let x = unsafe { std::slice::from_raw_parts(input_plane(ch, plane), g.plane) };
                    let [h0, h1, w0, w1] = g.rectangle(b, ph, pw, limit);
                    let mut sum = 0.0f32;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            sum += x[h as usize * g.width + w as usize];
                        }
                    }
                    let area = ((h1 - h0) * (w1 - w0)) as f32;
                    *v = if h1 <= h0 || w1 <= w0 { 0.0 } else { sum / area };
                    unsafe { *mapping.add(k) = ch as i32 };
                }
            }
            _ => unreachable!("checked at launch"),
        }
    }

    /// Backward: each part owns whole input channels (every batch's plane of them), so the
    /// scattered additions of different parts never meet; within a plane they run in
    /// torchvision's order (box, bin, sample).
    fn run_backward(&self, located: &[Option<Box>], bad_argmax: &AtomicBool) {
        let g = self.geometry;
        let work = g.batch * g.plane + g.rois * g.bins * g.channels / g.batch.max(1);
        let parts = thread_pool::threads().min((g.channels * work).div_ceil(1 << 15)).min(g.channels).max(1);
        thread_pool::run(parts, |p| {
            let (mut grads, mut out, mut samples) = (Vec::new(), Vec::new(), Vec::new());
            // SAFETY: checked at launch; this part writes only its channels' planes.
            let grad = unsafe { read(self.source, 0, g.rois * g.out_channels * g.bins, &mut grads) };
            for c in thread_pool::share(p, parts, g.channels) {
                for batch in 0..g.batch {
                    unsafe {
                        write(self.first, (batch * g.channels + c) * g.plane, g.plane, &mut out, |gi| {
                            gi.fill(0.0);
                            for (n, b) in located.iter().enumerate() {
                                match b {
                                    Some(b) if b.batch == batch => self.backward_box(b, n, c, grad, gi, &mut samples, bad_argmax),
                                    _ => {}
                                }
                            }
                        });
                    }
                }
            }
        });
    }

    /// Box `b`'s (number `n`) gradient into input channel `c`'s plane `gi`.
    ///
    /// # Safety
    /// Checked at launch: the mapping holds `rois * channels * bins` int32 values.
    #[allow(clippy::too_many_arguments)]
    unsafe fn backward_box(&self, b: &Box, n: usize, c: usize, grad: &[f32], gi: &mut [f32], samples: &mut Vec<Sample>, bad_argmax: &AtomicBool) {
        let g = self.geometry;
        let pooled_w = g.pooled[1];
        let scatter = |gi: &mut [f32], samples: &[Sample], value: f32, count: f32| {
            for s in samples.iter().filter(|s| s.inside) {
                for (&at, &w) in s.at.iter().zip(&s.w) {
                    gi[at] += value * w / count;
                }
            }
        };
        match self.op {
            RoiOp::Align => {
                let (grid, count) = g.grid(b);
                let first = (n * g.channels + c) * g.bins;
                for k in 0..g.bins {
                    g.samples(b, grid, k / pooled_w, k % pooled_w, samples);
                    scatter(gi, samples, grad[first + k], count);
                }
            }
            RoiOp::PsAlign => {
                // Input channel c is read by one output channel's one bin.
                let (c_out, k) = (c / g.bins, c % g.bins);
                let (grid, count) = g.grid(b);
                g.samples(b, grid, k / pooled_w, k % pooled_w, samples);
                scatter(gi, samples, grad[(n * g.out_channels + c_out) * g.bins + k], count);
            }
            RoiOp::Pool => {
                let first = (n * g.channels + c) * g.bins;
                let argmax = unsafe { std::slice::from_raw_parts((self.mapping as *const i32).add(first), g.bins) };
                for (k, &at) in argmax.iter().enumerate() {
                    match usize::try_from(at) {
                        Ok(at) if at < g.plane => gi[at] += grad[first + k],
                        Ok(_) => bad_argmax.store(true, Ordering::Relaxed),
                        Err(_) => {} // -1: an empty bin, nothing pooled
                    }
                }
            }
            RoiOp::PsPool => {
                let (c_out, k) = (c / g.bins, c % g.bins);
                let (ph, pw) = (k / pooled_w, k % pooled_w);
                let [h0, h1, w0, w1] = g.rectangle(b, ph, pw, [g.height as i32, g.width as i32]);
                if h1 <= h0 || w1 <= w0 {
                    return;
                }
                let area = ((h1 - h0) * (w1 - w0)) as f32;
                let value = grad[(n * g.out_channels + c_out) * g.bins + k] / area;
                for h in h0..h1 {
                    for w in w0..w1 {
                        gi[h as usize * g.width + w as usize] += value;
                    }
                }
            }
            _ => unreachable!("checked at launch"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_reads_the_edge_up_to_one_pixel_out_and_nothing_beyond() {
        let s = sample(4, 4, -0.5, 1.5);
        assert!(s.inside);
        assert_eq!(s.at, [1, 2, 5, 6]);
        assert_eq!(s.w, [0.5, 0.5, 0.0, 0.0]);
        assert!(!sample(4, 4, -1.5, 0.0).inside);
        assert!(!sample(4, 4, f32::NAN, 0.0).inside);
        let edge = sample(4, 4, 3.5, 3.5);
        assert_eq!(edge.at, [15; 4]);
        assert_eq!(edge.w, [1.0, 0.0, 0.0, 0.0]);
    }
}
