//! Convolution as matrix products. `im2col` copies every receptive field of a group's input
//! into one column of a matrix, so a single gemm with the group's weight computes all output
//! positions at once; the backward passes multiply the same three matrices the two other ways,
//! and `col2im` folds columns back onto the input. A transposed convolution is a
//! convolution's input gradient (see [`Conv`]), so the three cover both kinds.
//!
//! Operands are contiguous float32; 1-D and 2-D convolutions are 3-D ones with size-1 dimensions.

use super::matmul::{View, gemm_f32};
use super::pool;
use crate::ffi::ffi::{Conv, ConvShape};

/// The shape of one convolution, counts per group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub batch: usize,
    pub groups: usize,
    /// Input and output channels of one group.
    pub in_channels: usize,
    pub out_channels: usize,
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
}

impl Geometry {
    /// Checks what the C++ side promises (positive sizes and steps, channels divisible by the
    /// groups): anything else is an error here, never an access outside a tensor.
    pub(crate) fn new(s: &ConvShape) -> Option<Geometry> {
        let count = |v: i64| usize::try_from(v).ok();
        let three = |v: [i64; 3]| -> Option<[usize; 3]> { Some([count(v[0])?, count(v[1])?, count(v[2])?]) };
        let groups = count(s.groups).filter(|&g| g > 0)?;
        let (inputs, outputs) = (count(s.in_channels)?, count(s.out_channels)?);
        let g = Geometry {
            batch: count(s.batch)?,
            groups,
            in_channels: inputs / groups,
            out_channels: outputs / groups,
            input: three(s.input)?,
            output: three(s.output)?,
            kernel: three(s.kernel)?,
            stride: three(s.stride)?,
            padding: three(s.padding)?,
            dilation: three(s.dilation)?,
        };
        let positive = g.kernel.iter().chain(&g.stride).chain(&g.dilation).all(|&v| v > 0);
        (positive && inputs % groups == 0 && outputs % groups == 0).then_some(g)
    }

    /// Elements in one channel of the input, and of the output.
    pub(crate) fn pixels(&self) -> usize {
        self.input.iter().product()
    }
    pub(crate) fn positions(&self) -> usize {
        self.output.iter().product()
    }
    /// Rows of a group's column matrix: one per (input channel, kernel tap).
    pub(crate) fn rows(&self) -> usize {
        self.in_channels * self.kernel.iter().product::<usize>()
    }

    /// A 1x1 kernel with unit stride and no padding reads the input as it lies: its column
    /// matrix is the input itself, and no copy is needed.
    fn pointwise(&self) -> bool {
        self.kernel == [1; 3] && self.stride == [1; 3] && self.padding == [0; 3] && self.input == self.output
    }
}

// ANCHOR: im2col
/// The output positions `o` (of `outputs`) whose tap reads inside the input, `0 <= o * stride
/// + offset < size`, as a range: the rest read padding.
fn inside(offset: isize, stride: usize, size: usize, outputs: usize) -> std::ops::Range<usize> {
    let s = stride as isize;
    let lo = if offset >= 0 { 0 } else { (-offset + s - 1) / s };
    let hi = (size as isize - offset + s - 1).div_euclid(s).max(0);
    let (lo, hi) = ((lo as usize).min(outputs), (hi as usize).min(outputs));
    lo..hi.max(lo)
}

/// Visits each (row of the column matrix, output line) pair with the input line it reads, or
/// `None` where the whole line lies in padding: `visit(row_line, input_line, range, offset)`,
/// where `row_line` indexes the column matrix's line of `output[2]` entries, `range` is the
/// part of it inside the input, and entry `o` of that part reads element `o * stride + offset`.
fn for_each_line(g: &Geometry, mut visit: impl FnMut(usize, Option<usize>, std::ops::Range<usize>, isize)) {
    let ([k0, k1, k2], [o0, o1, o2], [i0, i1, i2]) = (g.kernel, g.output, g.input);
    let (s, p, d) = (g.stride, g.padding, g.dilation);
    let mut line = 0;
    for c in 0..g.in_channels {
        for a in 0..k0 {
            for b in 0..k1 {
                for e in 0..k2 {
                    let offset = (e * d[2]) as isize - p[2] as isize;
                    let range = inside(offset, s[2], i2, o2);
                    for x in 0..o0 {
                        let y0 = (x * s[0] + a * d[0]) as isize - p[0] as isize;
                        for y in 0..o1 {
                            let y1 = (y * s[1] + b * d[1]) as isize - p[1] as isize;
                            let within = (0..i0 as isize).contains(&y0) && (0..i1 as isize).contains(&y1);
                            let source = within.then(|| ((c * i0 + y0 as usize) * i1 + y1 as usize) * i2);
                            visit(line, source, range.clone(), offset);
                            line += 1;
                        }
                    }
                }
            }
        }
    }
}

/// Unrolls one group's input (`in_channels` planes) into its `rows() x positions()` columns.
fn im2col(g: &Geometry, input: &[f32], columns: &mut [f32]) {
    let (width, stride) = (g.output[2], g.stride[2]);
    for_each_line(g, |line, source, range, offset| {
        let dst = &mut columns[line * width..][..width];
        let Some(start) = source else { return dst.fill(0.0) };
        dst[..range.start].fill(0.0);
        dst[range.end..].fill(0.0);
        let src = &input[start..][..g.input[2]];
        if stride == 1 {
            let first = (range.start as isize + offset) as usize;
            dst[range.clone()].copy_from_slice(&src[first..][..range.len()]);
        } else {
            for o in range {
                dst[o] = src[(o as isize * stride as isize + offset) as usize];
            }
        }
    });
}

/// The reverse of [`im2col`]: adds each column entry into the input element it was read from.
fn col2im(g: &Geometry, columns: &[f32], input: &mut [f32]) {
    let (width, stride) = (g.output[2], g.stride[2]);
    for_each_line(g, |line, source, range, offset| {
        let Some(start) = source else { return };
        let src = &columns[line * width..][..width];
        let dst = &mut input[start..][..g.input[2]];
        for o in range {
            dst[(o as isize * stride as isize + offset) as usize] += src[o];
        }
    });
}
// ANCHOR_END: im2col

/// One convolution pass over runtime addresses of contiguous float32 tensors, named as in a
/// (not transposed) convolution: `input` [N, C_in, ...], `output` [N, C_out, ...], `weight`
/// [C_out, C_in / groups, ...], `bias` [C_out] or 0. [`Conv`] says which one is written.
#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Convolution {
    pub op: Conv,
    pub geometry: Geometry,
    pub input: usize,
    pub output: usize,
    pub weight: usize,
    pub bias: usize,
}

/// `len` float32 elements at runtime address `at`, element `first` onwards.
///
/// # Safety
/// The range lies in a tensor the launch checked, and no one else writes it meanwhile.
unsafe fn slice<'a>(at: usize, first: usize, len: usize) -> &'a mut [f32] {
    unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(first), len) }
}

impl Convolution {
    pub(crate) fn run(&self) {
        let g = self.geometry;
        // Enough samples: one per thread, each with its own column matrix. Fewer: one at a
        // time, each product split over the threads (a nested pool::run runs alone).
        let parts = if g.batch >= pool::threads() { pool::threads() } else { 1 };
        match self.op {
            Conv::BackwardWeight => self.weight_gradient(parts),
            _ => pool::run(parts, |p| {
                let mut columns = Vec::new();
                for n in (p..g.batch).step_by(parts) {
                    for group in 0..g.groups {
                        // SAFETY: the launch checked every operand's size against the geometry;
                        // parts own disjoint samples.
                        unsafe { self.sample(n, group, &mut columns) };
                    }
                }
            }),
        }
    }

    /// Sample `n`, group `group` of the forward pass (output = weight @ columns + bias) or of
    /// the input gradient (columns = weightᵀ @ output, folded into the input).
    unsafe fn sample(&self, n: usize, group: usize, columns: &mut Vec<f32>) {
        let g = &self.geometry;
        let (rows, positions, pixels) = (g.rows(), g.positions(), g.pixels());
        let (cin, cout) = (g.in_channels, g.out_channels);
        let input_at = (n * g.groups + group) * cin * pixels;
        let output_at = (n * g.groups + group) * cout * positions;
        let weight = View { ptr: self.weight + group * cout * rows * 4, rs: rows as isize, cs: 1 };
        let output = View { ptr: self.output + output_at * 4, rs: positions as isize, cs: 1 };
        unsafe {
            let input = slice(self.input, input_at, cin * pixels);
            if self.op == Conv::Forward {
                let cols = if g.pointwise() {
                    View { ptr: input.as_ptr() as usize, rs: positions as isize, cs: 1 }
                } else {
                    columns.resize(rows * positions, 0.0);
                    im2col(g, input, columns);
                    View { ptr: columns.as_ptr() as usize, rs: positions as isize, cs: 1 }
                };
                let out = slice(self.output, output_at, cout * positions);
                if self.bias != 0 {
                    let bias = slice(self.bias, group * cout, cout);
                    for (row, &b) in out.chunks_exact_mut(positions).zip(bias.iter()) {
                        row.fill(b);
                    }
                }
                gemm_f32(cout, positions, rows, View { ptr: out.as_mut_ptr() as usize, ..output }, self.bias != 0, weight, cols);
            } else if g.pointwise() {
                gemm_f32(cin, positions, cout, View { ptr: input.as_mut_ptr() as usize, rs: positions as isize, cs: 1 },
                         false, View { rs: 1, cs: rows as isize, ..weight }, output);
            } else {
                columns.resize(rows * positions, 0.0);
                let cols = View { ptr: columns.as_mut_ptr() as usize, rs: positions as isize, cs: 1 };
                gemm_f32(rows, positions, cout, cols, false, View { rs: 1, cs: rows as isize, ..weight }, output);
                input.fill(0.0);
                col2im(g, columns, input);
            }
        }
    }

    /// weight gradient = Σ over samples of output @ columnsᵀ: each part sums its samples into
    /// its own matrix, and the parts are added at the end.
    fn weight_gradient(&self, parts: usize) {
        let g = self.geometry;
        let (rows, positions, pixels) = (g.rows(), g.positions(), g.pixels());
        let (cin, cout) = (g.in_channels, g.out_channels);
        let size = g.groups * cout * rows;
        let sums: Vec<std::sync::Mutex<Vec<f32>>> = (0..parts).map(|_| Default::default()).collect();
        pool::run(parts, |p| {
            let (mut columns, mut sum) = (Vec::new(), vec![0.0f32; size]);
            for n in (p..g.batch).step_by(parts) {
                for group in 0..g.groups {
                    // SAFETY: as in `sample`; only read here.
                    let input = unsafe { slice(self.input, (n * g.groups + group) * cin * pixels, cin * pixels) };
                    let cols = if g.pointwise() {
                        input.as_ptr() as usize
                    } else {
                        columns.resize(rows * positions, 0.0);
                        im2col(&g, input, &mut columns);
                        columns.as_ptr() as usize
                    };
                    let output = self.output + (n * g.groups + group) * cout * positions * 4;
                    let dst = sum[group * cout * rows..].as_mut_ptr() as usize;
                    // dst [cout, rows] += output [cout, positions] @ colsᵀ [positions, rows]
                    unsafe {
                        gemm_f32(cout, rows, positions, View { ptr: dst, rs: rows as isize, cs: 1 }, true,
                                 View { ptr: output, rs: positions as isize, cs: 1 },
                                 View { ptr: cols, rs: 1, cs: positions as isize })
                    };
                }
            }
            *sums[p].lock().unwrap_or_else(|e| e.into_inner()) = sum;
        });
        // SAFETY: the weight tensor holds `size` elements (checked at launch).
        let weight = unsafe { slice(self.weight, 0, size) };
        weight.fill(0.0);
        for sum in sums {
            let sum = sum.into_inner().unwrap_or_else(|e| e.into_inner());
            for (w, s) in weight.iter_mut().zip(sum) {
                *w += s;
            }
        }
    }
}
