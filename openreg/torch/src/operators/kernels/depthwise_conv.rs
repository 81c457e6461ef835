//! Depthwise convolution (one input and one output channel per group: MobileNet's and
//! ConvNeXt's spatial filters), computed directly. Through im2col, each channel was a product of
//! one row by a column matrix, hundreds of tiny products per call: a 7x7 filter over 160
//! channels of 4x4 planes took 1.3 ms forward and 2.9 ms backward.
//!
//! The channels are taken 16 at a time, side by side in the lanes of one vector (as oneDNN
//! lays them out, `nChw16c`): a block's planes are copied into one zero-padded plane whose
//! elements are 16 channels each, so that every tap of every output is one multiply-add of 16
//! lanes, with no bounds test, whatever the plane's size, stride or dilation. A loop along one
//! plane's rows instead is a few elements long on the small planes of a network's last stages.

use std::ops::Range;

use super::conv::{Convolution, Geometry};
use super::math::mul_add;
#[cfg(target_arch = "x86_64")]
use super::softmax::{Simd, simd};
use super::thread_pool;
use crate::ffi::ffi::Conv;

/// Channels per block: the lanes of one AVX-512 vector of float32 (two AVX2 ones).
const L: usize = 16;
type Lanes = [f32; L];
/// Output positions taken together, tap by tap: their 64-byte sums (4 KB) stay in L1.
const TILE: usize = 64;

/// Whether `g` is depthwise: what [`run`] computes.
pub(super) fn applies(g: &Geometry) -> bool {
    g.in_channels == 1 && g.out_channels == 1
}

/// The padded plane of one block, and where the taps and outputs fall in it.
struct Layout {
    /// Extent of the padded plane along each dimension: what the last output's last tap
    /// reads, and at least the input with its leading padding.
    ext: [usize; 3],
    /// Per tap, its offset from an output's first tap.
    taps: Vec<usize>,
    /// Per output position, where its first tap reads.
    outputs: Vec<usize>,
}

impl Layout {
    fn new(g: &Geometry) -> Layout {
        let ext: [usize; 3] = std::array::from_fn(|d| {
            let reach = g.output[d].saturating_sub(1) * g.stride[d] + (g.kernel[d] - 1) * g.dilation[d] + 1;
            reach.max(g.padding[d] + g.input[d])
        });
        let flat = |[z, y, x]: [usize; 3]| (z * ext[1] + y) * ext[2] + x;
        let grid = |n: [usize; 3], step: [usize; 3]| -> Vec<usize> {
            let mut at = Vec::with_capacity(n.iter().product());
            for z in 0..n[0] {
                for y in 0..n[1] {
                    for x in 0..n[2] {
                        at.push(flat([z * step[0], y * step[1], x * step[2]]));
                    }
                }
            }
            at
        };
        Layout { ext, taps: grid(g.kernel, g.dilation), outputs: grid(g.output, g.stride) }
    }

    /// Calls `row(padded, input)` for each row of an input plane: where its first element sits
    /// in the padded plane, and in the plane.
    #[inline(always)]
    fn for_each_input_row(&self, g: &Geometry, mut row: impl FnMut(usize, usize)) {
        let ([i0, i1, i2], p) = (g.input, g.padding);
        for z in 0..i0 {
            for y in 0..i1 {
                row(((z + p[0]) * self.ext[1] + y + p[1]) * self.ext[2] + p[2], (z * i1 + y) * i2);
            }
        }
    }
}

/// One pass of a depthwise convolution (see [`applies`]) over the kernel threads: (sample,
/// block of channels) pairs for the forward pass and the input gradient, blocks of channels for
/// the weight gradient (each filter sums over every sample).
///
/// # Safety
/// The operands hold what the launch checked against the geometry.
pub(super) unsafe fn run(conv: &Convolution) {
    let g = conv.geometry;
    let blocks = g.groups.div_ceil(L);
    let units = if conv.op == Conv::BackwardWeight { blocks } else { g.batch * blocks };
    let parts = thread_pool::threads().min(units).max(1);
    let layout = Layout::new(&g);
    thread_pool::run(parts, |p| {
        let units = thread_pool::share(p, parts, units);
        // SAFETY: the caller's promise; parts take disjoint units. The CPU has the features
        // simd() found.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            match simd() {
                Simd::Avx512 => return units_avx512(conv, &layout, units),
                Simd::Avx2 => return units_avx2(conv, &layout, units),
                Simd::Baseline => {}
            }
            run_units::<false>(conv, &layout, units)
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn units_avx512(conv: &Convolution, layout: &Layout, units: Range<usize>) {
    unsafe { run_units::<true>(conv, layout, units) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn units_avx2(conv: &Convolution, layout: &Layout, units: Range<usize>) {
    unsafe { run_units::<true>(conv, layout, units) }
}

/// [`run`]'s work on `units`.
///
/// # Safety
/// As for [`run`], and no one else writes these units' planes meanwhile.
#[inline(always)]
unsafe fn run_units<const FMA: bool>(conv: &Convolution, layout: &Layout, units: Range<usize>) {
    let g = conv.geometry;
    let (pixels, positions, taps) = (g.pixels(), g.positions(), layout.taps.len());
    let blocks = g.groups.div_ceil(L);
    let zero = [0.0f32; L];
    let mut pad = vec![zero; layout.ext.iter().product()];
    let (mut filter, mut partial, mut grads) = (vec![zero; taps], vec![zero; taps], Vec::new());
    // Plane `c` of sample `n` in a tensor of planes of `len` elements.
    let plane = |at: usize, n: usize, c: usize, len: usize| (at as *mut f32).wrapping_add((n * g.groups + c) * len);
    for unit in units {
        let (n, block) = (unit / blocks, unit % blocks);
        let channels = block * L..(block * L + L).min(g.groups);
        // SAFETY (every access through `plane`): inside the operand the launch checked; a unit
        // writes only its own block's planes of one sample (filters, for the weight gradient).
        unsafe {
            if conv.op == Conv::BackwardWeight {
                filter.fill(zero);
                for n in 0..g.batch {
                    spread(&g, layout, &mut pad, channels.clone(), |c| plane(conv.input, n, c, pixels));
                    gather_all(&mut grads, positions, channels.clone(), |c| plane(conv.output, n, c, positions));
                    // Position by position, each tap's sum once: the taps' sums are independent
                    // (one sum over all positions would be a chain of dependent multiply-adds).
                    // Summed a tile at a time, then the tiles' sums: one running sum over
                    // thousands of positions loses digits CPU's blocked products keep.
                    for (grads, bases) in grads.chunks(TILE).zip(layout.outputs.chunks(TILE)) {
                        partial.fill(zero);
                        for (grad, &base) in grads.iter().zip(bases) {
                            for (p, &off) in partial.iter_mut().zip(&layout.taps) {
                                let (x, mut sum) = (pad[base + off], *p);
                                for l in 0..L {
                                    sum[l] = mul_add::<FMA>(grad[l], x[l], sum[l]);
                                }
                                *p = sum;
                            }
                        }
                        for (f, p) in filter.iter_mut().zip(&partial) {
                            for l in 0..L {
                                f[l] += p[l];
                            }
                        }
                    }
                }
                for (l, c) in channels.enumerate() {
                    for (tap, f) in filter.iter().enumerate() {
                        *(conv.weight as *mut f32).add(c * taps + tap) = f[l];
                    }
                }
                continue;
            }
            for (tap, f) in filter.iter_mut().enumerate() {
                *f = gather(channels.clone(), |c| *(conv.weight as *const f32).add(c * taps + tap));
            }
            if conv.op == Conv::Forward {
                spread(&g, layout, &mut pad, channels.clone(), |c| plane(conv.input, n, c, pixels));
                let bias = if conv.bias == 0 { zero } else { gather(channels.clone(), |c| *(conv.bias as *const f32).add(c)) };
                // Tap by tap over all the positions: the positions' sums are independent, where
                // a position's sum over its taps is one chain of dependent multiply-adds.
                // In tiles of positions whose sums stay in L1 while the taps pass over them.
                grads.clear();
                grads.resize(positions, bias);
                for (sums, bases) in grads.chunks_mut(TILE).zip(layout.outputs.chunks(TILE)) {
                    for (&f, &off) in filter.iter().zip(&layout.taps) {
                        for (acc, &base) in sums.iter_mut().zip(bases) {
                            let (x, mut sum) = (pad[base + off], *acc);
                            for l in 0..L {
                                sum[l] = mul_add::<FMA>(f[l], x[l], sum[l]);
                            }
                            *acc = sum;
                        }
                    }
                }
                for (l, c) in channels.clone().enumerate() {
                    let out = plane(conv.output, n, c, positions);
                    for (pos, sum) in grads.iter().enumerate() {
                        *out.add(pos) = sum[l];
                    }
                }
            } else {
                // The input gradient: each output's gradient, times each tap, back onto what
                // that tap read; what lands on padding is dropped.
                pad.fill(zero);
                gather_all(&mut grads, positions, channels.clone(), |c| plane(conv.output, n, c, positions));
                for (grads, bases) in grads.chunks(TILE).zip(layout.outputs.chunks(TILE)) {
                    for (&f, &off) in filter.iter().zip(&layout.taps) {
                        for (grad, &base) in grads.iter().zip(bases) {
                            // Whole vectors in and out: updated lane by lane in place, the
                            // compiler kept them scalar.
                            let mut x = pad[base + off];
                            for l in 0..L {
                                x[l] = mul_add::<FMA>(f[l], grad[l], x[l]);
                            }
                            pad[base + off] = x;
                        }
                    }
                }
                let planes: Vec<*mut f32> = channels.clone().map(|c| plane(conv.input, n, c, pixels)).collect();
                layout.for_each_input_row(&g, |from, to| {
                    for (x, lanes) in pad[from..from + g.input[2]].iter().enumerate() {
                        for (l, p) in planes.iter().enumerate() {
                            *p.add(to + x) = lanes[l];
                        }
                    }
                });
            }
        }
    }
}

/// Copies the block's input planes into the padded plane, channel `c` into its lane (zeros
/// around them, and in the lanes of a last block's missing channels): a row at a time, all the
/// block's planes side by side, so that the padded plane is written in order.
///
/// # Safety
/// `plane(c)` is channel `c`'s plane, `pixels()` elements.
#[inline(always)]
unsafe fn spread(g: &Geometry, layout: &Layout, pad: &mut [Lanes], channels: Range<usize>, plane: impl Fn(usize) -> *mut f32) {
    pad.fill([0.0; L]);
    let planes: Vec<*mut f32> = channels.map(plane).collect();
    layout.for_each_input_row(g, |to, from| {
        for (x, lanes) in pad[to..to + g.input[2]].iter_mut().enumerate() {
            for (l, p) in planes.iter().enumerate() {
                // SAFETY: the caller's promise.
                lanes[l] = unsafe { *p.add(from + x) };
            }
        }
    });
}

/// The block's output gradient, a vector of its channels per position (see [`gather`]).
///
/// # Safety
/// `plane(c)` is channel `c`'s plane, `positions` elements.
#[inline(always)]
unsafe fn gather_all(grads: &mut Vec<Lanes>, positions: usize, channels: Range<usize>, plane: impl Fn(usize) -> *mut f32) {
    grads.clear();
    grads.resize(positions, [0.0; L]);
    for (l, c) in channels.enumerate() {
        let from = plane(c);
        for (pos, lanes) in grads.iter_mut().enumerate() {
            // SAFETY: the caller's promise.
            lanes[l] = unsafe { *from.add(pos) };
        }
    }
}

/// One value per channel of the block, in its lane (zero in a last block's missing lanes).
#[inline(always)]
fn gather(channels: Range<usize>, value: impl Fn(usize) -> f32) -> Lanes {
    let mut lanes = [0.0; L];
    for (l, c) in channels.enumerate() {
        lanes[l] = value(c);
    }
    lanes
}
