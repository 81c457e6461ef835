//! Convolution as matrix products. `im2col` copies every receptive field of a group's input
//! into one column of a matrix, so a single gemm with the group's weight computes all output
//! positions at once; the backward passes multiply the same three matrices the two other ways,
//! and `col2im` folds columns back onto the input. A transposed convolution is a
//! convolution's input gradient (see [`Conv`]), so the three cover both kinds.
//!
//! Operands are contiguous float32; 1-D and 2-D convolutions are 3-D ones with size-1 dimensions.

use std::ops::Range;
use std::sync::Mutex;

use openreg_runtime as rt;

use super::dtype::Dtype;
use super::matmul::{PARALLEL_WORK, View, dot_rows, dot_rows_split, few_rows_against_many, gemm_f32, prefer_dot_rows};
use super::{depthwise_conv, thread_pool};
use super::{launch, dense};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{Conv, ConvShape, Dense};

// ANCHOR: launch_convolution
/// Launches one pass of a convolution over contiguous float32 operands, each checked to hold
/// the elements `shape` gives it (`bias`: address 0 when there is none).
pub(crate) fn launch_convolution(
    op: Conv, shape: ConvShape, input: Dense, output: Dense, weight: Dense, bias: Dense, device: i64,
) -> Result<()> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("convolution: {what}")));
    let g = Geometry::new(&shape).ok_or_else(|| invalid(format!("invalid shape {shape:?}")))?;
    let (cin, cout) = (g.groups * g.in_channels, g.groups * g.out_channels);
    let mut operands = vec![
        ("input", input, g.batch * cin * g.pixels()),
        ("output", output, g.batch * cout * g.positions()),
        ("weight", weight, cout * g.rows()),
    ];
    if bias.data != 0 {
        operands.push(("bias", bias, cout));
    }
    let mut at = [0usize; 4];
    for (k, (name, t, numel)) in operands.into_iter().enumerate() {
        if Dtype::from_code(t.dtype) != Some(Dtype::Float) || t.numel != numel {
            return Err(invalid(format!("{name} must be {numel} float32 elements, got {} of dtype code {}", t.numel, t.dtype)));
        }
        at[k] = dense(&t, Dtype::Float)?;
    }
    let work = Convolution { op, geometry: g, input: at[0], output: at[1], weight: at[2], bias: at[3] };
    launch(device, g.batch * cout * g.positions() * g.rows(), move || work.run())
}
// ANCHOR_END: launch_convolution

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
    if !im2col_same(g, input, columns) {
        im2col_lines(g, input, columns);
    }
}

/// [`im2col`] a line at a time.
fn im2col_lines(g: &Geometry, input: &[f32], columns: &mut [f32]) {
    let (width, stride) = (g.output[2], g.stride[2]);
    for_each_line(g, |line, source, range, offset| {
        let dst = &mut columns[line * width..][..width];
        let Some(start) = source else { return dst.fill(0.0) };
        dst[..range.start].fill(0.0);
        dst[range.end..].fill(0.0);
        if range.is_empty() {
            return; // every tap of the line reads padding (a kernel wider than input and padding)
        }
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

/// [`im2col`] for unit stride along the last two dimensions and lines as wide as the input's
/// (a "same" convolution): a tap's lines are then the input's lines shifted by one offset, so
/// they are copied as one block, and the entries that wrapped around from a neighbouring line
/// are zeroed after. A copy per line of 16 elements was a library call per 16 elements.
fn im2col_same(g: &Geometry, input: &[f32], columns: &mut [f32]) -> bool {
    let ([k0, k1, k2], [o0, o1, o2], [i0, i1, i2]) = (g.kernel, g.output, g.input);
    let (s, p, d) = (g.stride, g.padding, g.dilation);
    if s[1] != 1 || s[2] != 1 || o2 != i2 {
        return false;
    }
    let mut tap = columns.chunks_exact_mut(o1 * o2);
    for c in 0..g.in_channels {
        for a in 0..k0 {
            for b in 0..k1 {
                let down = (b * d[1]) as isize - p[1] as isize;
                let lines = inside(down, 1, i1, o1);
                for e in 0..k2 {
                    let offset = (e * d[2]) as isize - p[2] as isize;
                    let range = inside(offset, 1, i2, o2);
                    for x in 0..o0 {
                        let dst = tap.next().expect("rows() * output[0] taps");
                        let y0 = (x * s[0] + a * d[0]) as isize - p[0] as isize;
                        if !(0..i0 as isize).contains(&y0) || lines.is_empty() || range.is_empty() {
                            dst.fill(0.0);
                            continue;
                        }
                        let (head, rest) = dst.split_at_mut(lines.start * o2);
                        let (block, tail) = rest.split_at_mut(lines.len() * o2);
                        head.fill(0.0);
                        tail.fill(0.0);
                        // Entry `o` of the block's line `y` reads input line `y + lines.start +
                        // down` at `o + offset`: one contiguous run from the first line's first
                        // entry inside to the last line's last.
                        let first = (c * i0 + y0 as usize) * i1 * i2;
                        let first = first as isize + (lines.start as isize + down) * i2 as isize + offset;
                        let (lo, hi) = (range.start, block.len() - (o2 - range.end));
                        block[lo..hi].copy_from_slice(&input[(first + lo as isize) as usize..][..hi - lo]);
                        block[..lo].fill(0.0);
                        block[hi..].fill(0.0);
                        if range.len() < o2 {
                            for line in block.chunks_exact_mut(o2) {
                                line[..range.start].fill(0.0);
                                line[range.end..].fill(0.0);
                            }
                        }
                    }
                }
            }
        }
    }
    true
}

/// For each tap and output position (the column matrix's rows of one channel, in order), the
/// input element read within a channel's volume, or -1 where it lies in padding: what
/// [`im2col_gathered`] reads, computed once per launch.
fn gather_table(g: &Geometry) -> Vec<isize> {
    let ([k0, k1, k2], [o0, o1, o2], [i0, i1, i2]) = (g.kernel, g.output, g.input);
    let (s, p, d) = (g.stride, g.padding, g.dilation);
    let at = |o: usize, k: usize, dim: usize, size: usize| {
        let i = (o * s[dim] + k * d[dim]) as isize - p[dim] as isize;
        (0..size as isize).contains(&i).then_some(i as usize)
    };
    let mut table = Vec::with_capacity(k0 * k1 * k2 * o0 * o1 * o2);
    for a in 0..k0 {
        for b in 0..k1 {
            for e in 0..k2 {
                for x in 0..o0 {
                    for y in 0..o1 {
                        for z in 0..o2 {
                            let found = match (at(x, a, 0, i0), at(y, b, 1, i1), at(z, e, 2, i2)) {
                                (Some(u), Some(v), Some(w)) => ((u * i1 + v) * i2 + w) as isize,
                                _ => -1,
                            };
                            table.push(found);
                        }
                    }
                }
            }
        }
    }
    table
}

/// [`im2col`] by a [`gather_table`], into rows `stride` apart: for planes of a few positions,
/// where copying a line at a time spends its time on lines of four elements, and the rows go
/// straight into a wider matrix (samples side by side) with no second copy.
///
/// # Safety
/// `dst` holds `rows()` rows of `positions()` floats, `stride` apart, that nothing else
/// touches meanwhile.
unsafe fn im2col_gathered(g: &Geometry, table: &[isize], input: &[f32], dst: *mut f32, stride: usize) {
    // The gathers in the CPU's widest vectors, where it has them.
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return unsafe { im2col_gathered_avx512(g, table, input, dst, stride) };
    }
    unsafe { im2col_gathered_any(g, table, input, dst, stride) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn im2col_gathered_avx512(g: &Geometry, table: &[isize], input: &[f32], dst: *mut f32, stride: usize) {
    unsafe { im2col_gathered_any(g, table, input, dst, stride) }
}

#[inline(always)]
unsafe fn im2col_gathered_any(g: &Geometry, table: &[isize], input: &[f32], dst: *mut f32, stride: usize) {
    let (positions, volume) = (g.positions(), g.pixels());
    assert!(table.iter().all(|&i| i < volume as isize), "gather_table reads inside a channel");
    let taps = table.chunks_exact(positions.max(1));
    for (c, plane) in input.chunks_exact(volume).take(g.in_channels).enumerate() {
        for (t, tap) in taps.clone().enumerate() {
            // SAFETY: row c * taps + t of `dst`, as the caller promises.
            let row = unsafe { std::slice::from_raw_parts_mut(dst.add((c * taps.len() + t) * stride), positions) };
            for (v, &i) in row.iter_mut().zip(tap) {
                // SAFETY: i < volume (asserted above), the length of `plane`.
                *v = if i < 0 { 0.0 } else { unsafe { *plane.get_unchecked(i as usize) } };
            }
        }
    }
}

/// The reverse of [`im2col`]: adds each column entry into the input element it was read from.
fn col2im(g: &Geometry, columns: &[f32], input: &mut [f32]) {
    let (width, stride) = (g.output[2], g.stride[2]);
    for_each_line(g, |line, source, range, offset| {
        let Some(start) = source else { return };
        if range.is_empty() {
            return; // the whole line read padding: nothing to add back
        }
        let src = &columns[line * width..][..width];
        let dst = &mut input[start..][..g.input[2]];
        if stride == 1 {
            // Neighbours to neighbours: a loop over two slices, which vectorises.
            let first = (range.start as isize + offset) as usize;
            for (d, &s) in dst[first..][..range.len()].iter_mut().zip(&src[range]) {
                *d += s;
            }
        } else {
            for o in range {
                dst[(o as isize * stride as isize + offset) as usize] += src[o];
            }
        }
    });
}
// ANCHOR_END: im2col

// ANCHOR: winograd
/// Winograd's F(2x2, 3x3) for 3x3 convolutions with unit stride: each 2x2 block of outputs
/// (a tile) comes from a 4x4 block of inputs, and in the transformed space the convolution
/// is an elementwise product — summed over input channels, so 16 matrix products of
/// `[C_out, C_in] @ [C_in, tiles]`, with 16 multiplies per tile where the direct convolution
/// has 36 (2.25x fewer). Transforms (Lavin and Gray, 2015): `U = G g Gᵀ` for each 3x3 filter
/// `g`, `V = Bᵀ d B` for each 4x4 input block `d`, and `Y = Aᵀ M A` for each 4x4 product `M`.
struct Winograd {
    /// Tiles down and across one output plane.
    th: usize,
    tw: usize,
    /// One input plane zero-padded so that every tile's 4x4 block lies inside it.
    ph: usize,
    pw: usize,
}

impl Winograd {
    fn new(g: &Geometry) -> Winograd {
        let (th, tw) = (g.output[1].div_ceil(2), g.output[2].div_ceil(2));
        Winograd { th, tw, ph: 2 * th + 2, pw: 2 * tw + 2 }
    }

    fn tiles(&self) -> usize {
        self.th * self.tw
    }

    /// `U[ξ][k][c]` for the 16 positions ξ of a 4x4 block, from `weight` [C_out, C_in, 3, 3].
    fn filters(weight: &[f32], cout: usize, cin: usize) -> Vec<f32> {
        let mut u = vec![0.0f32; 16 * cout * cin];
        for (kc, g) in weight.chunks_exact(9).enumerate() {
            // G g: 4x3, then (G g) Gᵀ: 4x4. G = [[1, 0, 0], [½, ½, ½], [½, -½, ½], [0, 0, 1]].
            let mut t = [[0.0f32; 3]; 4];
            for j in 0..3 {
                let (a, b, c) = (g[j], g[3 + j], g[6 + j]);
                t[0][j] = a;
                t[1][j] = 0.5 * (a + b + c);
                t[2][j] = 0.5 * (a - b + c);
                t[3][j] = c;
            }
            for (i, [a, b, c]) in t.into_iter().enumerate() {
                for (j, value) in [a, 0.5 * (a + b + c), 0.5 * (a - b + c), c].into_iter().enumerate() {
                    u[(i * 4 + j) * cout * cin + kc] = value;
                }
            }
        }
        u
    }

    /// `V[ξ][c][t]` for every input channel and tile, from `input` [C_in, H, W]; `scratch`
    /// holds one zero-padded channel and one row of tiles at a time. Each step is a loop
    /// along a row of tiles, so that it compiles to SIMD code.
    /// Here for `channels` only: `v[ξ]` holds their rows of `V[ξ]`.
    fn inputs(&self, g: &Geometry, input: &[f32], channels: Range<usize>, scratch: &mut Vec<f32>, v: &mut [&mut [f32]]) {
        let ([_, ih, iw], [_, top, left]) = (g.input, g.padding);
        let (tiles, tw, pw) = (self.tiles(), self.tw, self.pw);
        scratch.clear();
        scratch.resize((self.ph + 4) * pw, 0.0);
        let (padded, t) = scratch.split_at_mut(self.ph * pw);
        let planes = input.chunks_exact(ih * iw).skip(channels.start).take(channels.len());
        for (c, plane) in planes.enumerate() {
            // Only the border ever holds zeros: each channel overwrites the same interior.
            for (y, row) in plane.chunks_exact(iw).enumerate().take(self.ph.saturating_sub(top)) {
                let n = iw.min(pw.saturating_sub(left));
                padded[(y + top) * pw + left..][..n].copy_from_slice(&row[..n]);
            }
            for ty in 0..self.th {
                // Bᵀ d along the four input rows: Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
                let d = &padded[2 * ty * pw..][..4 * pw];
                let (d0, d1, d2, d3) = (&d[..pw], &d[pw..2 * pw], &d[2 * pw..3 * pw], &d[3 * pw..]);
                let (t0, rest) = t.split_at_mut(pw);
                let (t1, rest) = rest.split_at_mut(pw);
                let (t2, t3) = rest.split_at_mut(pw);
                for x in 0..pw {
                    t0[x] = d0[x] - d2[x];
                    t1[x] = d1[x] + d2[x];
                    t2[x] = d2[x] - d1[x];
                    t3[x] = d1[x] - d3[x];
                }
                // ... then (Bᵀ d) B across each tile's four columns, 2 apart from tile to tile.
                for (i, row) in [&*t0, &*t1, &*t2, &*t3].into_iter().enumerate() {
                    let [v0, v1, v2, v3] = &mut v[i * 4..i * 4 + 4] else { unreachable!() };
                    let at = c * tiles + ty * tw;
                    let (v0, v1, v2, v3) = (&mut v0[at..][..tw], &mut v1[at..][..tw], &mut v2[at..][..tw], &mut v3[at..][..tw]);
                    for x in 0..tw {
                        let (a, b, c, d) = (row[2 * x], row[2 * x + 1], row[2 * x + 2], row[2 * x + 3]);
                        v0[x] = a - c;
                        v1[x] = b + c;
                        v2[x] = c - b;
                        v3[x] = b - d;
                    }
                }
            }
        }
    }

    /// `Aᵀ M A` for every output channel and tile, plus the bias, into `output` [C_out, OH, OW].
    /// Here for output channels `first..` only, whose planes `output` holds.
    fn outputs(&self, g: &Geometry, m: &[f32], bias: Option<&[f32]>, first: usize, scratch: &mut Vec<f32>, output: &mut [f32]) {
        let [_, oh, ow] = g.output;
        let (tiles, tw, cout) = (self.tiles(), self.tw, g.out_channels);
        scratch.clear();
        scratch.resize(10 * tw, 0.0);
        let (s, y) = scratch.split_at_mut(8 * tw);
        for (k, plane) in output.chunks_exact_mut(oh * ow).enumerate().map(|(k, p)| (first + k, p)) {
            let b = bias.map_or(0.0, |b| b[k]);
            for ty in 0..self.th {
                let row = |i: usize, j: usize| &m[((i * 4 + j) * cout + k) * tiles + ty * tw..][..tw];
                // Aᵀ M along each tile's four rows: Aᵀ = [[1, 1, 1, 0], [0, 1, -1, -1]].
                for (j, s) in s.chunks_exact_mut(2 * tw).enumerate() {
                    let (m0, m1, m2, m3) = (row(0, j), row(1, j), row(2, j), row(3, j));
                    let (s0, s1) = s.split_at_mut(tw);
                    for x in 0..tw {
                        s0[x] = m0[x] + m1[x] + m2[x];
                        s1[x] = m1[x] - m2[x] - m3[x];
                    }
                }
                // ... then (Aᵀ M) A: two output rows, two columns per tile.
                for a in 0..2 {
                    if 2 * ty + a >= oh {
                        break;
                    }
                    let col = |j: usize| &s[(j * 2 + a) * tw..][..tw];
                    let (p, q, r, t) = (col(0), col(1), col(2), col(3));
                    for x in 0..tw {
                        y[2 * x] = p[x] + q[x] + r[x] + b;
                        y[2 * x + 1] = q[x] - r[x] - t[x] + b;
                    }
                    plane[(2 * ty + a) * ow..][..ow].copy_from_slice(&y[..ow]);
                }
            }
        }
    }
}
// ANCHOR_END: winograd

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
/// Winograd's matrices V and M, kept from one call to the next. Allocated afresh, their pages
/// were mapped again on each call, and two threads faulting them in at once took 1.5 ms of a
/// 2.4 ms convolution (1x128x28x28).
static SCRATCH: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// A kept buffer of at least `len` elements, or a new one. Its contents are stale: every
/// element is written before it is read.
fn scratch(len: usize) -> Vec<f32> {
    let mut buffer = SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    buffer
}

/// Keeps `buffer` for the next call: two per thread, each under 16 MB (host memory that no
/// allocator statistic shows, so bounded; a convolution that needs more is large enough that
/// mapping its pages again costs little beside it).
fn keep(buffer: Vec<f32>) {
    if buffer.len() <= 1 << 22 {
        let mut kept = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < 2 * thread_pool::threads() {
            kept.push(buffer);
        }
    }
}

/// Puts sample `k`'s `[rows, positions]` block at columns `k * positions..` of the
/// `[rows, width]` matrix at address `wide`, samples side by side.
///
/// # Safety
/// `wide` holds `rows * width` floats, and nothing else touches those columns meanwhile.
unsafe fn place(wide: usize, width: usize, k: usize, block: &[f32], positions: usize) {
    for (r, row) in block.chunks_exact(positions).enumerate() {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), (wide as *mut f32).add(r * width + k * positions), positions) };
    }
}

/// Runs `each(k, scratch)` for samples `0..count` of a chunk, spread over the kernel threads,
/// each thread with a scratch buffer of `len` floats (a kept one: see [`scratch`]).
fn per_sample(count: usize, len: usize, each: impl Fn(usize, &mut [f32]) + Sync) {
    let parts = thread_pool::threads().min(count).max(1);
    thread_pool::run(parts, |p| {
        let mut buffer = scratch(len);
        for k in thread_pool::share(p, parts, count) {
            each(k, &mut buffer[..len]);
        }
        keep(buffer);
    });
}

unsafe fn slice<'a>(at: usize, first: usize, len: usize) -> &'a mut [f32] {
    unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(first), len) }
}

impl Convolution {
    pub(crate) fn run(&self) {
        let g = self.geometry;
        // Enough samples: one per thread, each with its own column matrix. Fewer: one at a
        // time, each product split over the threads (a nested thread_pool::run runs alone).
        let parts = if g.batch >= thread_pool::threads() { thread_pool::threads() } else { 1 };
        if depthwise_conv::applies(&g) {
            // SAFETY: the launch checked every operand's size against the geometry.
            return unsafe { depthwise_conv::run(self) };
        }
        if self.winograd() {
            return self.winograd_forward(parts);
        }
        if self.input_gradient_as_forward() {
            return;
        }
        if self.samples_side_by_side() {
            // SAFETY: the launch checked every operand's size against the geometry.
            return unsafe { self.run_side_by_side() };
        }
        match self.op {
            Conv::BackwardWeight if self.weight_gradient_in_one_product() => self.weight_gradient_side_by_side(),
            Conv::BackwardWeight => self.weight_gradient(parts),
            _ => thread_pool::run(parts, |p| {
                let mut columns = Vec::new();
                for n in thread_pool::share(p, parts, g.batch) {
                    for group in 0..g.groups {
                        // SAFETY: the launch checked every operand's size against the geometry;
                        // parts own disjoint samples.
                        unsafe { self.sample(n, group, &mut columns) };
                    }
                }
            }),
        }
    }

    // ANCHOR: input_gradient
    /// With unit stride, the input gradient is itself a convolution: the output gradient
    /// correlated with the weight flipped in every spatial dimension, input and output channels
    /// swapped, padded by `dilation * (kernel - 1) - padding`. Run as one, it takes the forward's
    /// paths: one long product over (channels x taps) and Winograd with channels enough, where
    /// the backward's product ran over the output channels alone (32 for the CNN's second
    /// layer) and `col2im` folded 9 copies of the result back. Returns whether it ran.
    fn input_gradient_as_forward(&self) -> bool {
        let g = self.geometry;
        let pad: [Option<usize>; 3] = std::array::from_fn(|d| (g.dilation[d] * (g.kernel[d] - 1)).checked_sub(g.padding[d]));
        let [Some(p0), Some(p1), Some(p2)] = pad else { return false };
        let fits = (0..3).all(|d| g.input[d] + g.dilation[d] * (g.kernel[d] - 1) == g.output[d] + 2 * [p0, p1, p2][d]);
        if self.op != Conv::BackwardInput || g.stride != [1; 3] || !fits {
            return false;
        }
        let geometry = Geometry { in_channels: g.out_channels, out_channels: g.in_channels, input: g.output, output: g.input, padding: [p0, p1, p2], ..g };
        let mut forward = Convolution { op: Conv::Forward, geometry, input: self.output, output: self.input, weight: 0, bias: 0 };
        // Asked before the weight is flipped: flipping 512x512 weights, for nothing, had been
        // half of a 1x1 convolution's input gradient (2.4 ms -> 1.1 ms).
        if !forward.winograd() {
            return false;
        }
        let (cin, cout, taps) = (g.in_channels, g.out_channels, g.kernel.iter().product::<usize>());
        // SAFETY: the launch checked the weight's `groups * cout * cin * taps` elements.
        let weight = unsafe { slice(self.weight, 0, g.groups * cout * cin * taps) };
        // [groups, cout, cin, taps] -> [groups, cin, cout, taps reversed]
        let mut flipped = vec![0.0f32; weight.len()];
        for (w, f) in weight.chunks_exact(cout * cin * taps).zip(flipped.chunks_exact_mut(cout * cin * taps)) {
            for (o, w) in w.chunks_exact(cin * taps).enumerate() {
                for (i, w) in w.chunks_exact(taps).enumerate() {
                    for (d, &w) in f[(i * cout + o) * taps..][..taps].iter_mut().rev().zip(w) {
                        *d = w;
                    }
                }
            }
        }
        forward.weight = flipped.as_ptr() as usize;
        forward.run();
        true
    }
    // ANCHOR_END: input_gradient

    /// Whether the forward pass goes through [`Winograd`]: a 2-D 3x3 kernel with unit stride
    /// and dilation, 32 channels or more each side, and planes of 128 tiles (2x2 outputs) or
    /// more. Each sample's 16 products are [C_out, C_in] @ [C_in, tiles]: with fewer tiles they
    /// are too narrow, each reading its weight transform again for a handful of columns
    /// (256 channels on 4x4 planes, batch 32: twice the time of im2col with the samples side
    /// by side). With 16 input channels, or planes under about 22x22, `gemm` runs the
    /// products too slowly.
    fn winograd(&self) -> bool {
        let g = &self.geometry;
        let tiles = g.output[1].div_ceil(2) * g.output[2].div_ceil(2);
        self.op == Conv::Forward
            && g.kernel == [1, 3, 3]
            && g.stride == [1; 3]
            && g.dilation == [1; 3]
            && g.input[0] == 1
            && g.padding[0] == 0
            && g.in_channels.min(g.out_channels) >= 32
            && tiles >= 128
    }

    fn winograd_forward(&self, parts: usize) {
        let g = self.geometry;
        let (cin, cout, w) = (g.in_channels, g.out_channels, Winograd::new(&g));
        let tiles = w.tiles();
        // SAFETY: the launch checked the weight's `groups * cout * cin * 9` elements.
        let weight = unsafe { slice(self.weight, 0, g.groups * cout * cin * 9) };
        let u: Vec<Vec<f32>> = weight.chunks_exact(cout * cin * 9).map(|f| Winograd::filters(f, cout, cin)).collect();
        // Fewer samples than threads: each sample's three steps are spread over the threads
        // instead (input channels, the 16 products, output channels). Split inside `gemm`, the
        // products were 16 hand-offs per sample, and the transforms ran on one thread.
        let threads = if parts == 1 { thread_pool::threads() } else { 1 };
        thread_pool::run(parts, |p| {
            let (mut v_buffer, mut m_buffer) = (scratch(16 * cin * tiles), scratch(16 * cout * tiles));
            let (v, m) = (&mut v_buffer[..16 * cin * tiles], &mut m_buffer[..16 * cout * tiles]);
            for n in thread_pool::share(p, parts, g.batch) {
                for group in 0..g.groups {
                    let sample = n * g.groups + group;
                    // SAFETY: as in `sample`; parts own disjoint samples.
                    let input = unsafe { slice(self.input, sample * cin * g.pixels(), cin * g.pixels()) };
                    // Each thread its input channels' rows of the 16 matrices V[ξ].
                    let mut rows: Vec<Vec<&mut [f32]>> = (0..threads).map(|_| Vec::with_capacity(16)).collect();
                    for matrix in v.chunks_exact_mut(cin * tiles) {
                        let mut rest = matrix;
                        for (t, rows) in rows.iter_mut().enumerate() {
                            let (mine, others) = rest.split_at_mut(thread_pool::share(t, threads, cin).len() * tiles);
                            rows.push(mine);
                            rest = others;
                        }
                    }
                    let rows: Vec<Mutex<Vec<&mut [f32]>>> = rows.into_iter().map(Mutex::new).collect();
                    thread_pool::run(threads, |t| {
                        let mut rows = rows[t].lock().unwrap_or_else(|e| e.into_inner());
                        w.inputs(&g, input, thread_pool::share(t, threads, cin), &mut Vec::new(), &mut rows);
                    });
                    drop(rows);
                    let at = (m.as_mut_ptr() as usize, v.as_ptr() as usize);
                    thread_pool::run(threads, |t| {
                        for xi in thread_pool::share(t, threads, 16) {
                            // M[ξ] [cout, tiles] = U[ξ] [cout, cin] @ V[ξ] [cin, tiles]
                            // SAFETY: three distinct buffers of these sizes; threads write distinct M[ξ].
                            unsafe {
                                gemm_f32(cout, tiles, cin, View { ptr: at.0 + xi * cout * tiles * 4, rs: tiles as isize, cs: 1 },
                                         false, View { ptr: u[group][xi * cout * cin..].as_ptr() as usize, rs: cin as isize, cs: 1 },
                                         View { ptr: at.1 + xi * cin * tiles * 4, rs: tiles as isize, cs: 1 })
                            };
                        }
                    });
                    // SAFETY: as for the input.
                    let out = unsafe { slice(self.output, sample * cout * g.positions(), cout * g.positions()) };
                    let bias = (self.bias != 0).then(|| unsafe { &*slice(self.bias, group * cout, cout) });
                    let mut planes = Vec::with_capacity(threads);
                    let mut rest = out;
                    for t in 0..threads {
                        let (mine, others) = rest.split_at_mut(thread_pool::share(t, threads, cout).len() * g.positions());
                        planes.push(Mutex::new(mine));
                        rest = others;
                    }
                    thread_pool::run(threads, |t| {
                        let mut planes = planes[t].lock().unwrap_or_else(|e| e.into_inner());
                        w.outputs(&g, m, bias, thread_pool::share(t, threads, cout).start, &mut Vec::new(), &mut planes);
                    });
                }
            }
            keep(v_buffer);
            keep(m_buffer);
        });
    }

    // ANCHOR: side_by_side
    /// Planes of few positions (a network's last stages): a chunk of samples' columns side by
    /// side in one product. A product per sample has a handful of columns, and each reads the
    /// whole weight again: ResNet's 512-channel 2x2 planes at batch 4 were four products of
    /// [512, 4608] @ [4608, 4], each bound by reading 9 MB of weight. A single sample takes this
    /// path too, for the way its products read the weight: along its rows.
    fn samples_side_by_side(&self) -> bool {
        let g = &self.geometry;
        matches!(self.op, Conv::Forward | Conv::BackwardInput) && g.positions() < 64
    }

    /// The forward pass or the input gradient, [`Self::samples_side_by_side`]: per group and
    /// chunk of samples, columns `[rows, samples * positions]` and one product, whose columns
    /// each sample then takes back.
    unsafe fn run_side_by_side(&self) {
        let g = self.geometry;
        let (rows, positions, pixels) = (g.rows(), g.positions(), g.pixels());
        let (cin, cout) = (g.in_channels, g.out_channels);
        let chunk = (256 / positions).clamp(1, g.batch); // about 256 columns per product
        let (mut columns, mut product, mut across) = (Vec::new(), Vec::new(), Vec::new());
        let table = if self.op == Conv::Forward && !g.pointwise() { gather_table(&g) } else { Vec::new() };
        for group in 0..g.groups {
            let weight = View { ptr: self.weight + group * cout * rows * 4, rs: rows as isize, cs: 1 };
            for first in (0..g.batch).step_by(chunk) {
                let count = chunk.min(g.batch - first);
                let width = count * positions;
                columns.resize(rows * width, 0.0);
                product.resize(cout * width, 0.0);
                // Each sample's copies in and out run on the threads side by side: samples write
                // disjoint columns (rows, in the transposed matrices) and their own planes.
                let input = |k: usize| unsafe { slice(self.input, ((first + k) * g.groups + group) * cin * pixels, cin * pixels) };
                let output = |k: usize| unsafe { slice(self.output, ((first + k) * g.groups + group) * cout * positions, cout * positions) };
                unsafe {
                    if self.op == Conv::Forward {
                        let at = columns.as_mut_ptr() as usize;
                        per_sample(count, 0, |k, _| {
                            // SAFETY: sample k's columns of the [rows, width] matrix, its alone.
                            if g.pointwise() {
                                place(at, width, k, input(k), positions);
                            } else {
                                im2col_gathered(&g, &table, input(k), (at as *mut f32).add(k * positions), width);
                            }
                        });
                        if few_rows_against_many(cout, width, rows) {
                            // A handful of columns: gemm would repack the whole weight for them.
                            // Each column's values laid along a row instead, and the weight's rows
                            // read where they are.
                            across.resize(width * rows, 0.0);
                            for (r, values) in columns.chunks_exact(width).enumerate() {
                                for (c, &v) in values.iter().enumerate() {
                                    across[c * rows + r] = v;
                                }
                            }
                            dot_rows_split(slice(self.weight, group * cout * rows, cout * rows), &across, rows, &mut product);
                        } else {
                            gemm_f32(cout, width, rows, View { ptr: product.as_mut_ptr() as usize, rs: width as isize, cs: 1 }, false,
                                     weight, View { ptr: columns.as_ptr() as usize, rs: width as isize, cs: 1 });
                        }
                        let bias = (self.bias != 0).then(|| &*slice(self.bias, group * cout, cout));
                        let product = &product;
                        per_sample(count, 0, |k, _| {
                            let out = output(k);
                            for (o, row) in out.chunks_exact_mut(positions).enumerate() {
                                row.copy_from_slice(&product[o * width + k * positions..][..positions]);
                                if let Some(bias) = bias {
                                    row.iter_mut().for_each(|v| *v += bias[o]);
                                }
                            }
                        });
                    } else {
                        // gradientᵀ [width, cout]: sample k's position p is row k * positions + p.
                        let at = product.as_mut_ptr() as usize;
                        per_sample(count, 0, |k, _| {
                            for (o, row) in output(k).chunks_exact(positions).enumerate() {
                                for (p, &v) in row.iter().enumerate() {
                                    // SAFETY: sample k's rows of the [width, cout] matrix, its alone.
                                    *(at as *mut f32).add((k * positions + p) * cout + o) = v;
                                }
                            }
                        });
                        // columnsᵀ [width, rows] = gradientᵀ [width, cout] @ weight [cout, rows], all
                        // three row-major: the weight read along its rows (weightᵀ @ gradient read it
                        // down its columns, 2.6x slower for 512 x 4608), and no operand or result
                        // strided the way gemm is slowest at (a column-major result: 2x).
                        across.resize(width * rows, 0.0);
                        gemm_f32(width, rows, cout, View { ptr: across.as_mut_ptr() as usize, rs: rows as isize, cs: 1 }, false,
                                 View { ptr: product.as_ptr() as usize, rs: cout as isize, cs: 1 }, weight);
                        let across = &across;
                        per_sample(count, rows * positions, |k, one| {
                            let input = input(k);
                            let block: &mut [f32] = if g.pointwise() { input } else { one };
                            for (r, row) in block.chunks_exact_mut(positions).enumerate() {
                                for (p, v) in row.iter_mut().enumerate() {
                                    *v = across[(k * positions + p) * rows + r];
                                }
                            }
                            if !g.pointwise() {
                                input.fill(0.0);
                                col2im(&g, one, input);
                            }
                        });
                    }
                }
            }
        }
    }
    // ANCHOR_END: side_by_side

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

    /// weight gradient = Σ over samples of output @ columnsᵀ. One part sums into the weight
    /// itself; several each sum their samples into a matrix of their own, added at the end.
    fn weight_gradient(&self, parts: usize) {
        let g = self.geometry;
        let size = g.groups * g.out_channels * g.rows();
        // SAFETY: the weight tensor holds `size` elements (checked at launch).
        let weight = unsafe { slice(self.weight, 0, size) };
        weight.fill(0.0);
        if parts == 1 {
            return self.sum_weight_gradient(0..g.batch, weight);
        }
        let sums: Vec<std::sync::Mutex<Vec<f32>>> = (0..parts).map(|_| Default::default()).collect();
        thread_pool::run(parts, |p| {
            // A kept buffer: a new one's pages are mapped again on each call (9 MB for
            // 512 x 512 x 3 x 3), which cost more than the sums.
            let mut sum = scratch(size);
            sum[..size].fill(0.0);
            self.sum_weight_gradient(thread_pool::share(p, parts, g.batch), &mut sum[..size]);
            *sums[p].lock().unwrap_or_else(|e| e.into_inner()) = sum;
        });
        for sum in sums {
            let sum = sum.into_inner().unwrap_or_else(|e| e.into_inner());
            for (w, s) in weight.iter_mut().zip(&sum) {
                *w += s;
            }
            keep(sum);
        }
    }

    /// Whether [`Self::weight_gradient_side_by_side`] pays: planes of few positions, and a
    /// product large enough for gemm to split it over the threads itself (the samples are not:
    /// a depthwise convolution's products, one tiny one per channel, stay a sample per thread).
    fn weight_gradient_in_one_product(&self) -> bool {
        let g = &self.geometry;
        let width = (256 / g.positions().max(1)).clamp(1, g.batch.max(1)) * g.positions();
        let (cout, rows) = (g.out_channels, g.rows());
        g.positions() < 64 && !prefer_dot_rows(cout, rows, width) && cout * rows * width >= PARALLEL_WORK
    }

    /// The weight gradient on planes of few positions: per group and chunk of samples, one
    /// product over all their positions, `[cout, width] @ [width, rows]`, which writes the
    /// weight once per chunk, where a product per sample (a handful of positions each) read and
    /// wrote all of it once per sample (9 MB for 512 x 512 x 3 x 3).
    fn weight_gradient_side_by_side(&self) {
        let g = self.geometry;
        let (rows, positions, pixels) = (g.rows(), g.positions(), g.pixels());
        let (cin, cout) = (g.in_channels, g.out_channels);
        let chunk = (256 / positions).clamp(1, g.batch.max(1));
        // SAFETY: the weight tensor holds `groups * cout * rows` elements (checked at launch).
        let weight = unsafe { slice(self.weight, 0, g.groups * cout * rows) };
        if g.batch == 0 {
            return weight.fill(0.0);
        }
        let (mut columns, mut one, mut gradient) = (Vec::new(), vec![0.0f32; rows * positions], Vec::new());
        for group in 0..g.groups {
            let dst = &mut weight[group * cout * rows..][..cout * rows];
            for first in (0..g.batch).step_by(chunk) {
                let samples = first..g.batch.min(first + chunk);
                let width = samples.len() * positions;
                columns.resize(rows * width, 0.0);
                gradient.resize(cout * width, 0.0);
                for (k, n) in samples.enumerate() {
                    let sample = n * g.groups + group;
                    // SAFETY: the launch checked both operands' sizes; only read here.
                    let (input, output) = unsafe {
                        (slice(self.input, sample * cin * pixels, cin * pixels), slice(self.output, sample * cout * positions, cout * positions))
                    };
                    // SAFETY: sample k's columns of matrices of `rows` and `cout` rows of `width`.
                    unsafe {
                        if g.pointwise() {
                            place(columns.as_mut_ptr() as usize, width, k, input, positions);
                        } else {
                            im2col(&g, input, &mut one);
                            place(columns.as_mut_ptr() as usize, width, k, &one, positions);
                        }
                        place(gradient.as_mut_ptr() as usize, width, k, output, positions);
                    }
                }
                // dst [cout, rows] = (dst +) gradient [cout, width] @ columnsᵀ [width, rows]; the
                // first chunk writes the weight without reading it (9 MB not read for 512 x 512 x 3 x 3).
                // SAFETY: three distinct buffers of these sizes.
                unsafe {
                    gemm_f32(cout, rows, width, View { ptr: dst.as_mut_ptr() as usize, rs: rows as isize, cs: 1 }, first > 0,
                             View { ptr: gradient.as_ptr() as usize, rs: width as isize, cs: 1 },
                             View { ptr: columns.as_ptr() as usize, rs: 1, cs: width as isize })
                };
            }
        }
    }

    /// Adds samples `samples`' weight gradients to `sum` [groups, cout, rows].
    fn sum_weight_gradient(&self, samples: Range<usize>, sum: &mut [f32]) {
        let g = self.geometry;
        let (rows, positions, pixels) = (g.rows(), g.positions(), g.pixels());
        let (cin, cout) = (g.in_channels, g.out_channels);
        let mut columns = Vec::new();
        for n in samples {
            for group in 0..g.groups {
                // SAFETY: as in `sample`; only read here.
                let input = unsafe { slice(self.input, (n * g.groups + group) * cin * pixels, cin * pixels) };
                let cols: &[f32] = if g.pointwise() {
                    input
                } else {
                    columns.resize(rows * positions, 0.0);
                    im2col(&g, input, &mut columns);
                    &columns
                };
                // SAFETY: as for the input.
                let output = unsafe { slice(self.output, (n * g.groups + group) * cout * positions, cout * positions) };
                let dst = &mut sum[group * cout * rows..][..cout * rows];
                // dst [cout, rows] += output [cout, positions] @ colsᵀ [positions, rows]
                if prefer_dot_rows(cout, rows, positions) {
                    dot_rows(output, cols, positions, dst);
                } else {
                    // SAFETY: three distinct buffers of these sizes.
                    unsafe {
                        gemm_f32(cout, rows, positions, View { ptr: dst.as_mut_ptr() as usize, rs: rows as isize, cs: 1 }, true,
                                 View { ptr: output.as_ptr() as usize, rs: positions as isize, cs: 1 },
                                 View { ptr: cols.as_ptr() as usize, rs: 1, cs: positions as isize })
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-D convolution of `[n, cin, h, w]` by `[cout, cin, 3, 3]`, the obvious way, in float64.
    fn reference(x: &[f32], w: &[f32], [n, cin, h, wd]: [usize; 4], cout: usize, pad: usize) -> Vec<f64> {
        let (oh, ow) = (h + 2 * pad - 2, wd + 2 * pad - 2);
        let mut out = vec![0f64; n * cout * oh * ow];
        for (i, o) in out.iter_mut().enumerate() {
            let (b, k, y, xx) = (i / (cout * oh * ow), i / (oh * ow) % cout, i / ow % oh, i % ow);
            for c in 0..cin {
                for (a, e) in (0..3).flat_map(|a| (0..3).map(move |e| (a, e))) {
                    let (iy, ix) = ((y + a) as isize - pad as isize, (xx + e) as isize - pad as isize);
                    if (0..h as isize).contains(&iy) && (0..wd as isize).contains(&ix) {
                        let v = x[((b * cin + c) * h + iy as usize) * wd + ix as usize];
                        *o += f64::from(v) * f64::from(w[((k * cin + c) * 3 + a) * 3 + e]);
                    }
                }
            }
        }
        out
    }

    /// The block copies of `im2col_same` against the line-at-a-time path, on every shape of
    /// padding, dilation and size that takes them (wrapped entries, taps wholly in padding).
    #[test]
    fn im2col_gathered_matches_im2col() {
        // Strides, padding, dilation and a kernel wider than the padded input's edge.
        for (input, kernel, stride, padding, dilation) in
            [([1, 4, 4], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1]), ([1, 7, 5], [1, 3, 2], [1, 2, 1], [0, 1, 0], [1, 1, 2]),
             ([3, 4, 4], [2, 3, 3], [1, 2, 2], [1, 0, 2], [1, 1, 1]), ([1, 2, 2], [1, 1, 5], [1, 1, 1], [0, 0, 2], [1, 1, 1])]
        {
            let output: [usize; 3] = std::array::from_fn(|d| (input[d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1);
            let g = Geometry { batch: 1, groups: 1, in_channels: 3, out_channels: 1, input, output, kernel, stride, padding, dilation };
            let x: Vec<f32> = (0..3 * g.pixels()).map(|i| i as f32 + 1.0).collect();
            let mut want = vec![0.0; g.rows() * g.positions()];
            im2col(&g, &x, &mut want);
            // Into the middle columns of a wider matrix, whose other columns stay as they were.
            let stride = g.positions() + 3;
            let mut got = vec![-1.0; g.rows() * stride];
            unsafe { im2col_gathered(&g, &gather_table(&g), &x, got.as_mut_ptr().add(2), stride) };
            for (r, row) in got.chunks_exact(stride).enumerate() {
                assert_eq!(&row[2..2 + g.positions()], &want[r * g.positions()..][..g.positions()], "{input:?} {kernel:?} row {r}");
                assert!(row[..2].iter().chain(&row[2 + g.positions()..]).all(|&v| v == -1.0));
            }
        }
    }

    #[test]
    fn im2col_same_matches_im2col_lines() {
        let mut tried = 0;
        for (kernel, dilation, pad, size) in [
            ([1, 3, 3], 1, 1, [1, 5, 7]), ([1, 3, 3], 2, 2, [1, 6, 6]), ([3, 3, 3], 1, 1, [4, 3, 5]),
            ([1, 1, 5], 1, 2, [1, 1, 9]), ([1, 5, 5], 1, 2, [1, 2, 3]), ([1, 4, 4], 1, 3, [1, 2, 2]),
            ([1, 3, 3], 1, 1, [1, 1, 1]), ([2, 3, 3], 3, 3, [3, 4, 4]),
        ] {
            // Padding `pad` on the last two dimensions keeps a line's width when
            // 2 * pad == dilation * (kernel - 1); otherwise the output is narrower or wider.
            let output = |i: usize, k: usize, p: usize| i + 2 * p - dilation * (k - 1);
            let g = Geometry {
                batch: 1, groups: 1, in_channels: 2, out_channels: 1,
                input: size,
                output: [output(size[0], kernel[0], 0), output(size[1], kernel[1], pad), output(size[2], kernel[2], pad)],
                kernel, stride: [1; 3], padding: [0, pad, pad], dilation: [1, dilation, dilation],
            };
            let input: Vec<f32> = (0..2 * g.pixels()).map(|v| v as f32 + 1.0).collect();
            let (mut same, mut lines) = (vec![f32::NAN; g.rows() * g.positions()], vec![f32::NAN; g.rows() * g.positions()]);
            im2col_lines(&g, &input, &mut lines);
            if im2col_same(&g, &input, &mut same) {
                assert_eq!(same, lines, "{g:?}");
                tried += 1;
            }
        }
        assert!(tried >= 6, "only {tried} shapes took the block path");
    }

    #[test]
    fn winograd_matches_the_definition() {
        // Odd and even planes (partial tiles), padding 0, 1 and more than the kernel, on
        // planes of 128 tiles or more (what `winograd()` takes).
        for ([n, cin, h, wd], cout, pad) in [([2, 32, 23, 21], 32, 1), ([1, 130, 26, 24], 128, 0), ([2, 32, 19, 20], 33, 3)] {
            let x: Vec<f32> = (0..n * cin * h * wd).map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
            let w: Vec<f32> = (0..cout * cin * 9).map(|i| ((i * 53 % 97) as f32) / 48.0 - 1.0).collect();
            let (oh, ow) = (h + 2 * pad - 2, wd + 2 * pad - 2);
            let mut out = vec![0f32; n * cout * oh * ow];
            let shape = ConvShape {
                batch: n as i64,
                groups: 1,
                in_channels: cin as i64,
                out_channels: cout as i64,
                input: [1, h as i64, wd as i64],
                output: [1, oh as i64, ow as i64],
                kernel: [1, 3, 3],
                stride: [1; 3],
                padding: [0, pad as i64, pad as i64],
                dilation: [1; 3],
            };
            let conv = Convolution {
                op: Conv::Forward,
                geometry: Geometry::new(&shape).unwrap(),
                input: x.as_ptr() as usize,
                output: out.as_mut_ptr() as usize,
                weight: w.as_ptr() as usize,
                bias: 0,
            };
            assert!(conv.winograd());
            conv.run();
            for (i, (&got, want)) in out.iter().zip(reference(&x, &w, [n, cin, h, wd], cout, pad)).enumerate() {
                assert!((f64::from(got) - want).abs() < 1e-4 * want.abs().max(1.0), "{i}: {got} vs {want}");
            }
        }
    }
}
