//! Depthwise convolution (one input and one output channel per group: MobileNet's and
//! ConvNeXt's spatial filters), computed directly on each channel's plane. Through im2col,
//! each plane was a product of one row by a column matrix, hundreds of tiny products per call:
//! a 7x7 filter over 160 channels of 4x4 planes took 1.3 ms forward and 2.9 ms backward.
//!
//! Each plane is first copied into a zero-padded plane as large as every tap reads, so that the
//! loops carry no bounds tests. With unit stride along rows and columns, the output is computed
//! as rows as wide as the padded plane's: a tap then reads one contiguous run of the padded
//! plane for all the rows at once (one loop of hundreds of elements, where a 7-wide row was a
//! loop of 7), and the entries past each real row's end are dropped.

use super::conv::{Convolution, Geometry};
use super::math::dot;
use super::thread_pool;
use crate::ffi::ffi::Conv;

/// Whether `g` is depthwise: what [`run`] computes.
pub(super) fn applies(g: &Geometry) -> bool {
    g.in_channels == 1 && g.out_channels == 1
}

/// The padded plane's extent along each dimension: what the last output's last tap reads,
/// and at least the input with its leading padding.
fn padded(g: &Geometry) -> [usize; 3] {
    std::array::from_fn(|d| {
        let reach = g.output[d].saturating_sub(1) * g.stride[d] + (g.kernel[d] - 1) * g.dilation[d] + 1;
        reach.max(g.padding[d] + g.input[d])
    })
}

/// Where input element (z, y, x) sits in the padded plane.
fn at(g: &Geometry, ext: [usize; 3], [z, y, x]: [usize; 3]) -> usize {
    ((z + g.padding[0]) * ext[1] + y + g.padding[1]) * ext[2] + x + g.padding[2]
}

/// Copies one input plane into `pad` (zeros around it).
fn fill(g: &Geometry, ext: [usize; 3], plane: &[f32], pad: &mut Vec<f32>) {
    pad.clear();
    pad.resize(ext.iter().product(), 0.0);
    for z in 0..g.input[0] {
        for y in 0..g.input[1] {
            let from = (z * g.input[1] + y) * g.input[2];
            let to = at(g, ext, [z, y, 0]);
            pad[to..to + g.input[2]].copy_from_slice(&plane[from..from + g.input[2]]);
        }
    }
}

/// Calls `row(output_row, padded_row_start, tap)` for each output row and tap: entry `x` of
/// the output row pairs with padded element `padded_row_start + x * stride[2]`.
fn for_each_row_and_tap(g: &Geometry, ext: [usize; 3], mut row: impl FnMut(usize, usize, usize)) {
    let ([k0, k1, k2], [o0, o1, _]) = (g.kernel, g.output);
    let (s, d) = (g.stride, g.dilation);
    for z in 0..o0 {
        for y in 0..o1 {
            let out = z * o1 + y;
            for a in 0..k0 {
                for b in 0..k1 {
                    let line = ((z * s[0] + a * d[0]) * ext[1] + y * s[1] + b * d[1]) * ext[2];
                    for e in 0..k2 {
                        row(out, line + e * d[2], (a * k1 + b) * k2 + e);
                    }
                }
            }
        }
    }
}

/// One pass of a depthwise convolution (see [`applies`]), its planes spread over the kernel
/// threads: samples x channels for the forward pass and the input gradient, channels for the
/// weight gradient (each channel's filter sums over every sample).
///
/// # Safety
/// The operands hold what the launch checked against the geometry.
pub(super) unsafe fn run(conv: &Convolution) {
    let g = conv.geometry;
    let (pixels, positions, taps) = (g.pixels(), g.positions(), g.kernel.iter().product::<usize>());
    let planes = if conv.op == Conv::BackwardWeight { g.groups } else { g.batch * g.groups };
    let parts = thread_pool::threads().min(planes).max(1);
    thread_pool::run(parts, |p| {
        let mut pad = Vec::new();
        for plane in thread_pool::share(p, parts, planes) {
            let c = plane % g.groups;
            // SAFETY: each range lies in the operand the launch checked against the geometry;
            // parts write disjoint planes (channels' filters, for the weight gradient).
            unsafe {
                let w = slice(conv.weight, c * taps, taps);
                if conv.op == Conv::Forward {
                    let bias = if conv.bias != 0 { slice(conv.bias, c, 1)[0] } else { 0.0 };
                    forward(&g, slice(conv.input, plane * pixels, pixels), w, bias, slice(conv.output, plane * positions, positions), &mut pad);
                } else if conv.op == Conv::BackwardInput {
                    input_gradient(&g, slice(conv.output, plane * positions, positions), w, slice(conv.input, plane * pixels, pixels), &mut pad);
                } else {
                    w.fill(0.0);
                    for n in 0..g.batch {
                        let sample = n * g.groups + c;
                        let (input, grad) = (slice(conv.input, sample * pixels, pixels), slice(conv.output, sample * positions, positions));
                        add_weight_gradient(&g, input, grad, w, &mut pad);
                    }
                }
            }
        }
    });
}

/// With unit stride along rows and columns: calls `tap(start, tap)` for each tap of output
/// slice `z`, whose wide rows (see the module's comment), as one run of [`wide_len`] elements,
/// pair with the padded plane's elements from `start` on.
fn for_each_tap(g: &Geometry, ext: [usize; 3], z: usize, mut tap: impl FnMut(usize, usize)) {
    let [k0, k1, k2] = g.kernel;
    let (s, d) = (g.stride, g.dilation);
    for a in 0..k0 {
        for b in 0..k1 {
            for e in 0..k2 {
                tap(((z * s[0] + a * d[0]) * ext[1] + b * d[1]) * ext[2] + e * d[2], (a * k1 + b) * k2 + e);
            }
        }
    }
}

/// Whether [`for_each_tap`] applies: unit stride along rows and columns.
fn wide_rows(g: &Geometry) -> bool {
    g.stride[1] == 1 && g.stride[2] == 1 && g.output[1] > 0 && g.output[2] > 0
}

/// The elements of a slice's wide rows up to the last real entry: the last row stops at the
/// output's width, so that no tap reads past the padded plane.
fn wide_len(g: &Geometry, ext: [usize; 3]) -> usize {
    (g.output[1] - 1) * ext[2] + g.output[2]
}

/// `out = bias + input ⋆ w` on one plane.
fn forward(g: &Geometry, input: &[f32], w: &[f32], bias: f32, out: &mut [f32], pad: &mut Vec<f32>) {
    let (ext, width, step) = (padded(g), g.output[2], g.stride[2]);
    fill(g, ext, input, pad);
    if wide_rows(g) {
        let (len, rows, slice) = (wide_len(g, ext), g.output[1], g.output[1] * width);
        let mut wide = vec![0.0f32; len];
        for z in 0..g.output[0] {
            wide.fill(bias);
            for_each_tap(g, ext, z, |start, tap| {
                let wt = w[tap];
                for (v, &x) in wide.iter_mut().zip(&pad[start..start + len]) {
                    *v += wt * x;
                }
            });
            for y in 0..rows {
                out[z * slice + y * width..][..width].copy_from_slice(&wide[y * ext[2]..][..width]);
            }
        }
        return;
    }
    out.fill(bias);
    for_each_row_and_tap(g, ext, |o, first, tap| {
        let (row, wt) = (&mut out[o * width..][..width], w[tap]);
        if step == 1 {
            for (v, &x) in row.iter_mut().zip(&pad[first..first + width]) {
                *v += wt * x;
            }
        } else {
            for (i, v) in row.iter_mut().enumerate() {
                *v += wt * pad[first + i * step];
            }
        }
    });
}

/// The input gradient of one plane: each output's gradient, times each tap, back onto the
/// element that tap read; what fell on padding is dropped.
fn input_gradient(g: &Geometry, grad: &[f32], w: &[f32], input: &mut [f32], pad: &mut Vec<f32>) {
    let (ext, width, step) = (padded(g), g.output[2], g.stride[2]);
    pad.clear();
    pad.resize(ext.iter().product(), 0.0);
    if wide_rows(g) {
        // The gradient spread to wide rows, zero past each row's end: those entries add nothing.
        let (len, slice) = (wide_len(g, ext), g.output[1] * width);
        let mut wide = vec![0.0f32; len];
        for z in 0..g.output[0] {
            for y in 0..g.output[1] {
                wide[y * ext[2]..][..width].copy_from_slice(&grad[z * slice + y * width..][..width]);
            }
            for_each_tap(g, ext, z, |start, tap| {
                let wt = w[tap];
                for (v, &d) in pad[start..start + len].iter_mut().zip(&wide) {
                    *v += wt * d;
                }
            });
        }
    } else {
        for_each_row_and_tap(g, ext, |o, first, tap| {
            let (row, wt) = (&grad[o * width..][..width], w[tap]);
        if step == 1 {
            for (v, &d) in pad[first..first + width].iter_mut().zip(row) {
                *v += wt * d;
            }
        } else {
            for (i, &d) in row.iter().enumerate() {
                pad[first + i * step] += wt * d;
            }
        }
        });
    }
    for z in 0..g.input[0] {
        for y in 0..g.input[1] {
            let (to, from) = ((z * g.input[1] + y) * g.input[2], at(g, ext, [z, y, 0]));
            input[to..to + g.input[2]].copy_from_slice(&pad[from..from + g.input[2]]);
        }
    }
}

/// Adds one sample's share to a channel's filter gradient: per tap, the output gradient dotted
/// with what that tap read.
fn add_weight_gradient(g: &Geometry, input: &[f32], grad: &[f32], w: &mut [f32], pad: &mut Vec<f32>) {
    let (ext, width, step) = (padded(g), g.output[2], g.stride[2]);
    fill(g, ext, input, pad);
    if wide_rows(g) {
        let (len, slice) = (wide_len(g, ext), g.output[1] * width);
        let mut wide = vec![0.0f32; len];
        for z in 0..g.output[0] {
            for y in 0..g.output[1] {
                wide[y * ext[2]..][..width].copy_from_slice(&grad[z * slice + y * width..][..width]);
            }
            for_each_tap(g, ext, z, |start, tap| w[tap] += dot(&wide, &pad[start..start + len]));
        }
        return;
    }
    for_each_row_and_tap(g, ext, |o, first, tap| {
        let row = &grad[o * width..][..width];
        w[tap] += if step == 1 {
            dot(row, &pad[first..first + width])
        } else {
            row.iter().enumerate().map(|(i, &d)| d * pad[first + i * step]).sum::<f32>()
        };
    });
}

/// `len` float32 elements at runtime address `at`, element `first` onwards.
///
/// # Safety
/// The range lies in an operand the launch checked, and no one else writes it meanwhile.
unsafe fn slice<'a>(at: usize, first: usize, len: usize) -> &'a mut [f32] {
    unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(first), len) }
}
