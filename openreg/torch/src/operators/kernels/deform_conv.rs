//! torchvision's deformable convolution (`deform_conv2d`, with an optional modulation mask):
//! the sampling passes. The C++ operator (`TorchVision.cpp`) multiplies the weight with the
//! sampled columns on the device, as a convolution would with `im2col`'s; these kernels are
//! the passes a plain convolution does not have:
//!
//! - `Im2col`: each kernel tap of each output position reads the input at its offset point,
//!   bilinearly, times the mask: the columns `[channels * kh * kw, batch * out_h * out_w]`;
//! - `Col2im`: the columns' gradient scattered back onto the input's pixels;
//! - `Col2imCoord`: the gradient of each offset and mask value.
//!
//! Sample points, weights and summation order follow torchvision's CPU kernels, so results
//! agree with them to rounding.

use openreg_runtime as rt;

use super::dtype::{Dtype, read, write};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Dense, DeformPass, DeformShape};

/// Operands: `Im2col`: columns | input, offset, mask; `Col2im`: grad_input | columns, offset,
/// mask; `Col2imCoord`: grad_offset, grad_mask | columns, input, offset, mask. Without a mask
/// (`use_mask` false) the mask and grad_mask are absent (address 0). False for dtypes not ours.
pub(crate) fn launch_deform(pass: DeformPass, shape: DeformShape, operands: &[Dense], device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("deform_conv2d {pass:?}: {what}")));
    let Some(g) = Geometry::new(&shape) else {
        return Err(invalid(format!("invalid shape {shape:?}")));
    };
    let (columns, input, offsets, masks) = (g.taps * g.batch * g.positions, g.batch * g.channels * g.plane, g.offset_len(), g.mask_len());
    let sizes: &[usize] = match pass {
        DeformPass::Im2col => &[columns, input, offsets, masks],
        DeformPass::Col2im => &[input, columns, offsets, masks],
        DeformPass::Col2imCoord => &[offsets, masks, columns, input, offsets, masks],
        _ => return Err(invalid("unknown pass".into())),
    };
    if operands.len() != sizes.len() {
        return Err(invalid(format!("{} operands expected, got {}", sizes.len(), operands.len())));
    }
    let Some(dtype) = Dtype::from_code(operands[0].dtype).filter(|d| matches!(d, Dtype::Float | Dtype::Half)) else {
        return Ok(false);
    };
    let mut slots = Vec::with_capacity(operands.len());
    for (k, (t, &size)) in operands.iter().zip(sizes).enumerate() {
        let absent = size == 0 && t.data == 0;
        if !absent && t.dtype != operands[0].dtype {
            return Ok(false);
        }
        if t.numel != size {
            return Err(invalid(format!("operand {k} has {} elements, {size} expected", t.numel)));
        }
        slots.push((view(t.data, t.numel * dtype.size(), &[t.storage, t.storage_len])?, dtype));
    }
    if g.batch * g.positions == 0 || g.channels == 0 {
        return Ok(true); // the C++ side zero-fills what has no source
    }
    let work = Deform { pass, g, slots };
    launch(device, columns.max(input), move || work.run())?;
    Ok(true)
}

/// The sizes of one call, checked and in `usize`.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    plane: usize,
    kernel: [usize; 2],
    kernel_len: usize,
    stride: [i64; 2],
    padding: [i64; 2],
    dilation: [i64; 2],
    groups: usize,
    out: [usize; 2],
    positions: usize,
    /// Rows of the columns: channels * kernel taps.
    taps: usize,
    use_mask: bool,
}

impl Geometry {
    fn new(s: &DeformShape) -> Option<Geometry> {
        let u = |v: i64| usize::try_from(v).ok().filter(|&v| v <= i32::MAX as usize);
        let (batch, channels, height, width, groups) = (u(s.batch)?, u(s.channels)?, u(s.height)?, u(s.width)?, u(s.offset_groups)?);
        let kernel = [u(s.kernel[0])?, u(s.kernel[1])?];
        let out = [u(s.out[0])?, u(s.out[1])?];
        let positive = s.stride.iter().chain(&s.dilation).all(|&v| v > 0) && kernel.iter().all(|&v| v > 0);
        if !positive || groups == 0 || channels % groups != 0 || s.padding.iter().any(|&p| p < 0) {
            return None;
        }
        let plane = height.checked_mul(width)?;
        let positions = out[0].checked_mul(out[1])?;
        let kernel_len = kernel[0] * kernel[1];
        let taps = channels.checked_mul(kernel_len)?;
        taps.checked_mul(batch)?.checked_mul(positions)?;
        batch.checked_mul(channels)?.checked_mul(plane)?;
        batch.checked_mul(groups)?.checked_mul(2 * kernel_len)?.checked_mul(positions)?;
        Some(Geometry { batch, channels, height, width, plane, kernel, kernel_len, stride: s.stride, padding: s.padding, dilation: s.dilation, groups, out, positions, taps, use_mask: s.use_mask })
    }

    /// Where tap `(i, j)` of output position `(y, x)` reads, before its offset.
    fn base(&self, i: usize, j: usize, y: usize, x: usize) -> (f32, f32) {
        let h = y as i64 * self.stride[0] - self.padding[0] + i as i64 * self.dilation[0];
        let w = x as i64 * self.stride[1] - self.padding[1] + j as i64 * self.dilation[1];
        (h as f32, w as f32)
    }

    /// Where tap `tap` of output position `(y, x)` reads (offset applied) and its mask value;
    /// `at`: the group's first offset and mask elements ([`Self::offset_at`]).
    fn point(&self, offset: &[f32], mask: &[f32], at: (usize, usize), tap: usize, y: usize, x: usize) -> (f32, f32, f32) {
        let (o, m) = at;
        let pos = y * self.out[1] + x;
        let (h0, w0) = self.base(tap / self.kernel[1], tap % self.kernel[1], y, x);
        let h = h0 + offset[o + 2 * tap * self.positions + pos];
        let w = w0 + offset[o + (2 * tap + 1) * self.positions + pos];
        (h, w, if self.use_mask { mask[m + tap * self.positions + pos] } else { 1.0 })
    }

    /// The elements of the offsets and of the mask (0 without one).
    fn offset_len(&self) -> usize {
        self.batch * self.groups * 2 * self.kernel_len * self.positions
    }

    fn mask_len(&self) -> usize {
        if self.use_mask { self.batch * self.groups * self.kernel_len * self.positions } else { 0 }
    }

    /// The first element of the offsets (y, then x: `2 * tap` and `2 * tap + 1`) of batch
    /// `b`'s offset group of channel `c`, and of its mask.
    fn offset_at(&self, b: usize, c: usize) -> (usize, usize) {
        let group = c / (self.channels / self.groups);
        let bg = b * self.groups + group;
        (bg * 2 * self.kernel_len * self.positions, bg * self.kernel_len * self.positions)
    }
}

/// The input at `(h, w)`, bilinearly; pixels outside the map read as zero and a point a pixel
/// or more outside reads nothing. Written as "not inside" so that NaN reads nothing too.
fn interpolate(plane: &[f32], height: usize, width: usize, h: f32, w: f32) -> f32 {
    let (hf, wf) = (height as f32, width as f32);
    if !(h > -1.0 && h < hf && w > -1.0 && w < wf) {
        return 0.0;
    }
    let (h_low, w_low) = (h.floor() as i64, w.floor() as i64);
    let (lh, lw) = (h - h_low as f32, w - w_low as f32);
    let (hh, hw) = (1.0 - lh, 1.0 - lw);
    let at = |y: i64, x: i64| {
        if y >= 0 && x >= 0 && y < height as i64 && x < width as i64 { plane[y as usize * width + x as usize] } else { 0.0 }
    };
    let (v1, v2, v3, v4) = (at(h_low, w_low), at(h_low, w_low + 1), at(h_low + 1, w_low), at(h_low + 1, w_low + 1));
    hh * hw * v1 + hh * lw * v2 + lh * hw * v3 + lh * lw * v4
}

/// The derivative of the interpolated value along y (`along_y`) or x at `(h, w)`.
fn coordinate_weight(plane: &[f32], height: usize, width: usize, h: f32, w: f32, along_y: bool) -> f32 {
    let (y_l, x_l) = (h.floor() as i64, w.floor() as i64);
    let at = |y: i64, x: i64| {
        if y >= 0 && x >= 0 && y < height as i64 && x < width as i64 { plane[y as usize * width + x as usize] } else { 0.0 }
    };
    let (v_yx, v_yx1, v_y1x, v_y1x1) = (at(y_l, x_l), at(y_l, x_l + 1), at(y_l + 1, x_l), at(y_l + 1, x_l + 1));
    if along_y {
        let dx = w - x_l as f32;
        dx * (v_y1x1 - v_yx1) + (1.0 - dx) * (v_y1x - v_yx)
    } else {
        let dy = h - y_l as f32;
        dy * (v_y1x1 - v_y1x) + (1.0 - dy) * (v_yx1 - v_yx)
    }
}

/// One launched pass: the runtime's views of its operands, in `launch_deform`'s order.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Deform {
    pass: DeformPass,
    g: Geometry,
    slots: Vec<(usize, Dtype)>,
}

impl Deform {
    pub(crate) fn run(&self) {
        let g = &self.g;
        // Units each part owns whole: a channel's column rows, an input plane, an offset plane.
        let units = match self.pass {
            DeformPass::Im2col => g.channels,
            DeformPass::Col2im => g.batch * g.channels,
            _ => g.batch * g.groups * 2 * g.kernel_len,
        };
        let work = g.taps * g.batch * g.positions * 4;
        let parts = thread_pool::threads().min(work.div_ceil(1 << 15)).min(units).max(1);
        thread_pool::run(parts, |p| {
            let mut buffers: [Vec<f32>; 6] = Default::default();
            // SAFETY: the launch checked every operand's size; each part writes its units only.
            unsafe {
                match self.pass {
                    DeformPass::Im2col => self.im2col(thread_pool::share(p, parts, units), &mut buffers),
                    DeformPass::Col2im => self.col2im(thread_pool::share(p, parts, units), &mut buffers),
                    _ => self.col2im_coord(thread_pool::share(p, parts, units), &mut buffers),
                }
            }
        });
    }

    /// Reads operand `k` whole (float32 in place, else converted into `buffer`).
    unsafe fn operand<'a>(&self, k: usize, len: usize, buffer: &'a mut Vec<f32>) -> &'a [f32] {
        if len == 0 { &[] } else { unsafe { read(self.slots[k], 0, len, buffer) } }
    }

    unsafe fn im2col(&self, channels: std::ops::Range<usize>, buffers: &mut [Vec<f32>; 6]) {
        let g = &self.g;
        let [input_buffer, offset_buffer, mask_buffer, out_buffer, ..] = buffers;
        let input = unsafe { self.operand(1, g.batch * g.channels * g.plane, input_buffer) };
        let offset = unsafe { self.operand(2, g.offset_len(), offset_buffer) };
        let mask = unsafe { self.operand(3, g.mask_len(), mask_buffer) };
        let row_len = g.batch * g.positions;
        for c in channels {
            for tap in 0..g.kernel_len {
                let row = c * g.kernel_len + tap;
                unsafe {
                    write(self.slots[0], row * row_len, row_len, out_buffer, |out| {
                        for b in 0..g.batch {
                            let plane = &input[(b * g.channels + c) * g.plane..][..g.plane];
                            let at = g.offset_at(b, c);
                            for y in 0..g.out[0] {
                                for x in 0..g.out[1] {
                                    let (h, w, scale) = g.point(offset, mask, at, tap, y, x);
                                    out[b * g.positions + y * g.out[1] + x] = scale * interpolate(plane, g.height, g.width, h, w);
                                }
                            }
                        }
                    });
                }
            }
        }
    }

    unsafe fn col2im(&self, planes: std::ops::Range<usize>, buffers: &mut [Vec<f32>; 6]) {
        let g = &self.g;
        let [columns_buffer, offset_buffer, mask_buffer, out_buffer, ..] = buffers;
        let columns = unsafe { self.operand(1, g.taps * g.batch * g.positions, columns_buffer) };
        let offset = unsafe { self.operand(2, g.offset_len(), offset_buffer) };
        let mask = unsafe { self.operand(3, g.mask_len(), mask_buffer) };
        let row_len = g.batch * g.positions;
        for unit in planes {
            let (b, c) = (unit / g.channels, unit % g.channels);
            let at = g.offset_at(b, c);
            unsafe {
                write(self.slots[0], unit * g.plane, g.plane, out_buffer, |gi| {
                    gi.fill(0.0);
                    for tap in 0..g.kernel_len {
                        let column = &columns[(c * g.kernel_len + tap) * row_len + b * g.positions..][..g.positions];
                        for y in 0..g.out[0] {
                            for x in 0..g.out[1] {
                                let pos = y * g.out[1] + x;
                                let (h, w, scale) = g.point(offset, mask, at, tap, y, x);
                                if !(h.is_finite() && w.is_finite()) {
                                    continue;
                                }
                                // The up to four pixels within one pixel of the point (C++'s
                                // truncating int() picks the 3x3 neighbourhood's centre).
                                let (hc, wc) = (h as i64, w as i64);
                                for yp in hc - 1..=hc + 1 {
                                    for xp in wc - 1..=wc + 1 {
                                        let inside = yp >= 0 && xp >= 0 && yp < g.height as i64 && xp < g.width as i64;
                                        let (dy, dx) = ((h - yp as f32).abs(), (w - xp as f32).abs());
                                        if inside && dy < 1.0 && dx < 1.0 {
                                            let weight = (1.0 - dy) * (1.0 - dx);
                                            gi[yp as usize * g.width + xp as usize] += scale * weight * column[pos];
                                        }
                                    }
                                }
                            }
                        }
                    }
                });
            }
        }
    }

    unsafe fn col2im_coord(&self, units: std::ops::Range<usize>, buffers: &mut [Vec<f32>; 6]) {
        let g = &self.g;
        let [columns_buffer, input_buffer, offset_buffer, mask_buffer, out_buffer, mask_out_buffer] = buffers;
        let columns = unsafe { self.operand(2, g.taps * g.batch * g.positions, columns_buffer) };
        let input = unsafe { self.operand(3, g.batch * g.channels * g.plane, input_buffer) };
        let offset = unsafe { self.operand(4, g.offset_len(), offset_buffer) };
        let mask = unsafe { self.operand(5, g.mask_len(), mask_buffer) };
        let (row_len, per_group) = (g.batch * g.positions, g.channels / g.groups);
        let offset_channels = g.groups * 2 * g.kernel_len;
        for unit in units {
            let (b, oc) = (unit / offset_channels, unit % offset_channels);
            let (group, within) = (oc / (2 * g.kernel_len), oc % (2 * g.kernel_len));
            let (tap, along_y) = (within / 2, within % 2 == 0);
            let at = g.offset_at(b, group * per_group);
            let mut mask_grad = vec![0.0f32; if g.use_mask && along_y { g.positions } else { 0 }];
            unsafe {
                write(self.slots[0], unit * g.positions, g.positions, out_buffer, |grad| {
                    for y in 0..g.out[0] {
                        for x in 0..g.out[1] {
                            let pos = y * g.out[1] + x;
                            let (h, w, scale) = g.point(offset, mask, at, tap, y, x);
                            let (mut sum, mut mask_sum) = (0.0f32, 0.0f32);
                            for k in 0..per_group {
                                let c = group * per_group + k;
                                let col = columns[(c * g.kernel_len + tap) * row_len + b * g.positions + pos];
                                let plane = &input[(b * g.channels + c) * g.plane..][..g.plane];
                                sum += scale * coordinate_weight(plane, g.height, g.width, h, w, along_y) * col;
                                if !mask_grad.is_empty() {
                                    mask_sum += col * interpolate(plane, g.height, g.width, h, w);
                                }
                            }
                            grad[pos] = sum;
                            if let Some(v) = mask_grad.get_mut(pos) {
                                *v = mask_sum;
                            }
                        }
                    }
                });
                if !mask_grad.is_empty() {
                    write(self.slots[1], at.1 + tap * g.positions, g.positions, mask_out_buffer, |out| out.copy_from_slice(&mask_grad));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_reads_zero_outside_and_blends_inside() {
        let plane = [1.0, 2.0, 3.0, 4.0]; // 2x2
        assert_eq!(interpolate(&plane, 2, 2, 0.5, 0.5), 2.5);
        assert_eq!(interpolate(&plane, 2, 2, -0.5, 0.0), 0.5); // half of pixel (0, 0)
        assert_eq!(interpolate(&plane, 2, 2, -1.0, 0.0), 0.0);
        assert_eq!(interpolate(&plane, 2, 2, f32::NAN, 0.0), 0.0);
    }
}
