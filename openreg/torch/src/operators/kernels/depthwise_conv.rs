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
//! The planes go into and out of lanes 16 by 16 elements, a block transposed in registers.
//!
//! Moving every element into and out of lanes can cost more than the taps. 2-D and 1-D
//! convolutions stepping one input per output along a row take the row path instead: a plane
//! is copied, zero-padded, into a buffer, and each output row is a run of consecutive outputs,
//! a vector of them per multiply-add of a tap. Rows narrower than a vector, one input apart
//! both ways, are one run over the whole padded plane (the outputs between rows dropped).

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
/// Independent sums in registers: four chains of multiply-adds hide each one's latency.
const CHAINS: usize = 4;

/// Whether `g` is depthwise: what [`run`] computes.
pub(super) fn applies(g: &Geometry) -> bool {
    g.in_channels == 1 && g.out_channels == 1
}

/// Whether [`rows`] computes this pass: planes one deep (2-D or 1-D), outputs one input apart
/// along a row, rows at least a vector wide; for the input gradient, rows one apart too (it is
/// then the flipped filter's forward pass over the output gradient). Narrower rows: the
/// forward pass and the input gradient when [`by_plane`] says so.
fn by_rows(g: &Geometry, op: Conv) -> bool {
    let flat = g.input[0] == 1 && g.output[0] == 1 && g.kernel[0] == 1;
    let across = g.stride[2] == 1 && g.output[2] >= L && g.input[2] >= L;
    flat && ((across && (op != Conv::BackwardInput || g.stride[1] == 1)) || (op != Conv::BackwardWeight && by_plane(g)))
}

/// Whether rows narrower than a vector are computed along the whole plane at once (see
/// `rows::correlate_plane`): outputs one input apart both ways, and at least half of the lanes
/// computed are outputs (the rest fall between rows, in the padding).
fn by_plane(g: &Geometry) -> bool {
    let [_, oh, ow] = g.output;
    let row = Layout::new(g).ext[2];
    let narrow = ow < L || g.input[2] < L;
    let lanes = ((oh.max(1) - 1) * row + ow).div_ceil(L) * L;
    narrow && g.stride[1] == 1 && g.stride[2] == 1 && oh * ow * g.input[1] * g.input[2] > 0 && lanes <= 2 * oh * ow
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
    let rows = by_rows(&g, conv.op);
    // Units: (sample, channel) or (sample, block of channels); the weight gradient's sum over
    // the samples stays in one unit.
    let per_sample = if rows { g.groups } else { g.groups.div_ceil(L) };
    let units = if conv.op == Conv::BackwardWeight { per_sample } else { g.batch * per_sample };
    let parts = thread_pool::threads().min(units).max(1);
    let layout = Layout::new(&g);
    thread_pool::run(parts, |p| {
        let units = thread_pool::share(p, parts, units);
        // SAFETY: the caller's promise; parts take disjoint units. The CPU has the features
        // simd() found.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            match simd() {
                Simd::Avx512 => return units_avx512(conv, &layout, units, rows),
                Simd::Avx2 => return units_avx2(conv, &layout, units, rows),
                Simd::Baseline => {}
            }
            either::<false>(conv, &layout, units, rows)
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn units_avx512(conv: &Convolution, layout: &Layout, units: Range<usize>, rows: bool) {
    unsafe { either::<true>(conv, layout, units, rows) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn units_avx2(conv: &Convolution, layout: &Layout, units: Range<usize>, rows: bool) {
    unsafe { either::<true>(conv, layout, units, rows) }
}

/// # Safety
/// As for [`run_units`].
#[inline(always)]
unsafe fn either<const FMA: bool>(conv: &Convolution, layout: &Layout, units: Range<usize>, rows: bool) {
    unsafe {
        if rows {
            rows::run_units::<FMA>(conv, layout, units)
        } else {
            run_units::<FMA>(conv, layout, units)
        }
    }
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
    let (mut filter, mut grads) = (vec![zero; taps], Vec::new());
    // What the furthest tap of the last output reads, plus one.
    let reach = layout.outputs.iter().max().map_or(0, |&b| b + layout.taps.iter().max().copied().unwrap_or(0) + 1);
    // A block's planes in lanes, a vector per pixel, on their way into or out of `pad`.
    let mut staged = Vec::new();
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
                    spread(&g, layout, &mut pad, &mut staged, channels.clone(), |c| plane(conv.input, n, c, pixels));
                    gather_all(&mut grads, positions, channels.clone(), |c| plane(conv.output, n, c, positions));
                    // Position by position, each tap's sum once: the taps' sums are independent
                    // (one sum over all positions would be a chain of dependent multiply-adds).
                    // Summed a tile at a time, then the tiles' sums: one running sum over
                    // thousands of positions loses digits CPU's blocked products keep.
                    assert!(reach <= pad.len() && grads.len() == layout.outputs.len(), "a tap outside the padded plane");
                    let (pad, grads) = (pad.as_ptr(), grads.as_ptr());
                    for (tile, bases) in layout.outputs.chunks(TILE).enumerate() {
                        let grads = grads.add(tile * TILE);
                        for (f, &off) in filter.iter_mut().zip(&layout.taps) {
                            let mut sums = [zero; CHAINS];
                            let whole = bases.len() / CHAINS * CHAINS;
                            let mut p = 0;
                            while p < whole {
                                for (k, sum) in sums.iter_mut().enumerate() {
                                    // Whole vectors in and out (updated in place, lane by lane,
                                    // the compiler kept them scalar).
                                    let (g, x, mut s) = (*grads.add(p + k), *pad.add(*bases.get_unchecked(p + k) + off), *sum);
                                    for l in 0..L {
                                        s[l] = mul_add::<FMA>(g[l], x[l], s[l]);
                                    }
                                    *sum = s;
                                }
                                p += CHAINS;
                            }
                            while p < bases.len() {
                                let (g, x, mut s) = (*grads.add(p), *pad.add(*bases.get_unchecked(p) + off), sums[0]);
                                for l in 0..L {
                                    s[l] = mul_add::<FMA>(g[l], x[l], s[l]);
                                }
                                sums[0] = s;
                                p += 1;
                            }
                            let [s0, s1, s2, s3] = sums;
                            for l in 0..L {
                                f[l] += (s0[l] + s1[l]) + (s2[l] + s3[l]);
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
                spread(&g, layout, &mut pad, &mut staged, channels.clone(), |c| plane(conv.input, n, c, pixels));
                let bias = if conv.bias == 0 { zero } else { gather(channels.clone(), |c| *(conv.bias as *const f32).add(c)) };
                // Four positions at a time, their sums in registers while the taps pass over
                // them: four independent chains of multiply-adds.
                grads.clear();
                grads.resize(positions, bias);
                assert!(reach <= pad.len(), "a tap outside the padded plane");
                let (pad, bases) = (pad.as_ptr(), &layout.outputs);
                let mut p = 0;
                while p < positions {
                    let group = if positions - p >= CHAINS { CHAINS } else { 1 };
                    let mut sums = [bias; CHAINS];
                    for (&f, &off) in filter.iter().zip(&layout.taps) {
                        for (k, sum) in sums.iter_mut().enumerate().take(group) {
                            // Whole vectors in and out (updated in place, lane by lane, the
                            // compiler kept them scalar); SAFETY: the assert above.
                            let (x, mut s) = (*pad.add(bases[p + k] + off), *sum);
                            for l in 0..L {
                                s[l] = mul_add::<FMA>(f[l], x[l], s[l]);
                            }
                            *sum = s;
                        }
                    }
                    grads[p..p + group].copy_from_slice(&sums[..group]);
                    p += group;
                }
                let outs: Vec<*mut f32> = channels.clone().map(|c| plane(conv.output, n, c, positions)).collect();
                from_lanes(&grads, &outs);
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
                staged.resize(pixels, zero);
                let width = g.input[2];
                layout.for_each_input_row(&g, |from, to| staged[to..to + width].copy_from_slice(&pad[from..from + width]));
                from_lanes(&staged, &planes);
            }
        }
    }
}

/// Copies the block's input planes into the padded plane, channel `c` into its lane (zeros in
/// the lanes of a last block's missing channels): the planes into lanes (`staged`, a vector per
/// pixel), then a row of vectors at a time into place. Only the input's rows are written: the
/// zeros around them stay from the first block.
///
/// # Safety
/// `plane(c)` is channel `c`'s plane, `pixels()` elements.
#[inline(always)]
unsafe fn spread(g: &Geometry, layout: &Layout, pad: &mut [Lanes], staged: &mut Vec<Lanes>, channels: Range<usize>,
                 plane: impl Fn(usize) -> *mut f32) {
    let planes: Vec<*const f32> = channels.map(|c| plane(c) as *const f32).collect();
    // SAFETY: the caller's promise.
    unsafe { to_lanes(&planes, g.pixels(), staged) };
    let width = g.input[2];
    layout.for_each_input_row(g, |to, from| pad[to..to + width].copy_from_slice(&staged[from..from + width]));
}

/// The block's output gradient, a vector of its channels per position.
///
/// # Safety
/// `plane(c)` is channel `c`'s plane, `positions` elements.
#[inline(always)]
unsafe fn gather_all(grads: &mut Vec<Lanes>, positions: usize, channels: Range<usize>, plane: impl Fn(usize) -> *mut f32) {
    let planes: Vec<*const f32> = channels.map(|c| plane(c) as *const f32).collect();
    // SAFETY: the caller's promise.
    unsafe { to_lanes(&planes, positions, grads) };
}

/// `lanes[p][l] = planes[l][p]` for the `len` elements of each plane (zero in the lanes past the
/// last plane): 16 by 16 elements at a time, transposed in registers.
///
/// # Safety
/// Each plane holds `len` floats.
#[inline(always)]
unsafe fn to_lanes(planes: &[*const f32], len: usize, lanes: &mut Vec<Lanes>) {
    lanes.clear();
    let whole = len / L * L;
    let mut block = [[0.0f32; L]; L];
    for p in (0..whole).step_by(L) {
        for (row, &plane) in block.iter_mut().zip(planes) {
            // SAFETY: the caller's promise.
            *row = unsafe { plane.add(p).cast::<Lanes>().read_unaligned() };
        }
        lanes.extend_from_slice(&transpose(&block));
    }
    // SAFETY (each read): the caller's promise.
    lanes.extend((whole..len).map(|p| gather(0..planes.len(), |l| unsafe { *planes[l].add(p) })));
}

/// `planes[l][p] = lanes[p][l]` for each plane, the inverse of [`to_lanes`].
///
/// # Safety
/// Each plane holds `lanes.len()` floats, and no one else writes them meanwhile.
#[inline(always)]
unsafe fn from_lanes(lanes: &[Lanes], planes: &[*mut f32]) {
    let whole = lanes.len() / L * L;
    for p in (0..whole).step_by(L) {
        let block = transpose(lanes[p..p + L].try_into().expect("a block of 16"));
        for (row, &plane) in block.iter().zip(planes) {
            // SAFETY: the caller's promise.
            unsafe { plane.add(p).cast::<Lanes>().write_unaligned(*row) };
        }
    }
    for (l, &plane) in planes.iter().enumerate() {
        for (p, v) in lanes.iter().enumerate().skip(whole) {
            // SAFETY: the caller's promise.
            unsafe { *plane.add(p) = v[l] };
        }
    }
}

/// `out[j][i] = rows[i][j]`: with AVX-512, 64 shuffles in registers instead of 256 moves.
#[inline(always)]
fn transpose(rows: &[Lanes; L]) -> [Lanes; L] {
    #[cfg(target_arch = "x86_64")]
    if matches!(simd(), Simd::Avx512) {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { transpose_avx512(rows) };
    }
    std::array::from_fn(|j| std::array::from_fn(|i| rows[i][j]))
}

/// [`transpose`]: floats interleaved in pairs of rows, then pairs of floats in fours of rows
/// (each 128-bit lane then holds one column of four rows), then the 128-bit lanes of four
/// vectors transposed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_avx512(rows: &[Lanes; L]) -> [Lanes; L] {
    use std::arch::x86_64::*;
    let mut out = [[0.0f32; L]; L];
    // SAFETY: loads and stores of whole rows of `rows` and `out`.
    unsafe {
        let mut a = [_mm512_setzero_ps(); L];
        for i in 0..L {
            a[i] = _mm512_loadu_ps(rows[i].as_ptr());
        }
        let mut t = [_mm512_setzero_ps(); L];
        for k in 0..L / 2 {
            t[2 * k] = _mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]);
        }
        // u[4k + c], lane q: column 4q + c of rows 4k..4k + 4.
        let mut u = [_mm512_setzero_ps(); L];
        for k in 0..L / 4 {
            let pd = |v: __m512| _mm512_castps_pd(v);
            u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * k]), pd(t[4 * k + 2])));
            u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * k]), pd(t[4 * k + 2])));
            u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * k + 1]), pd(t[4 * k + 3])));
            u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * k + 1]), pd(t[4 * k + 3])));
        }
        for c in 0..4 {
            let (u0, u1, u2, u3) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
            let v0 = _mm512_shuffle_f32x4::<0x44>(u0, u1);
            let v1 = _mm512_shuffle_f32x4::<0xEE>(u0, u1);
            let v2 = _mm512_shuffle_f32x4::<0x44>(u2, u3);
            let v3 = _mm512_shuffle_f32x4::<0xEE>(u2, u3);
            _mm512_storeu_ps(out[c].as_mut_ptr(), _mm512_shuffle_f32x4::<0x88>(v0, v2));
            _mm512_storeu_ps(out[4 + c].as_mut_ptr(), _mm512_shuffle_f32x4::<0xDD>(v0, v2));
            _mm512_storeu_ps(out[8 + c].as_mut_ptr(), _mm512_shuffle_f32x4::<0x88>(v1, v3));
            _mm512_storeu_ps(out[12 + c].as_mut_ptr(), _mm512_shuffle_f32x4::<0xDD>(v1, v3));
        }
    }
    out
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

/// The row path (see the module's comment): one channel of one sample at a time, its plane
/// copied into a zero-padded buffer so that no tap needs a bounds test.
mod rows {
    use super::{Convolution, Geometry, L, Layout, mul_add};
    use crate::ffi::ffi::Conv;

    /// Where the input gradient's buffer holds the output gradient: `lead` rows and columns of
    /// zeros before it, so that every flipped tap of every input lands inside the buffer.
    struct Flipped {
        lead: [usize; 2],
        ext: [usize; 2],
    }

    impl Flipped {
        fn new(g: &Geometry) -> Flipped {
            let lead: [usize; 2] = std::array::from_fn(|d| ((g.kernel[d + 1] - 1) * g.dilation[d + 1]).saturating_sub(g.padding[d + 1]));
            let ext = std::array::from_fn(|d| (g.input[d + 1] + g.padding[d + 1]).max(g.output[d + 1]) + lead[d]);
            Flipped { lead, ext }
        }
    }

    /// [`super::run`]'s work on `units` ((sample, channel) pairs; channels for the weight
    /// gradient).
    ///
    /// # Safety
    /// As for [`super::run`], and no one else writes these units' planes meanwhile.
    #[inline(always)]
    pub(super) unsafe fn run_units<const FMA: bool>(conv: &Convolution, layout: &Layout, units: std::ops::Range<usize>) {
        let g = conv.geometry;
        let (pixels, positions, taps) = (g.pixels(), g.positions(), layout.taps.len());
        let ([_, ih, iw], [_, oh, ow]) = (g.input, g.output);
        let flipped = Flipped::new(&g);
        let size = if conv.op == Conv::BackwardInput { flipped.ext[0] * flipped.ext[1] } else { layout.ext.iter().product() };
        let row = layout.ext[2];
        // Rows narrower than a vector: the whole plane's outputs at once, in `scratch`.
        let narrow = ow < L || iw < L;
        let (mut scratch, mut reach) = (Vec::new(), size);
        if narrow {
            let (step, rows, width) = if conv.op == Conv::BackwardInput { (flipped.ext[1], ih, iw) } else { (row, oh, ow) };
            let vectors = ((rows - 1) * step + width).div_ceil(L);
            scratch = vec![0.0f32; vectors * L];
            reach = reach.max(size + vectors * L);
        }
        // L more: the weight gradient's last vector of a row reads past the plane's last row.
        let mut buffer = vec![0.0f32; reach + L];
        // Per tap, its weight (each unit's own) and where it reads in the buffer.
        let mut offsets: Vec<(f32, usize)> = if conv.op == Conv::BackwardInput {
            // Input (y, x) takes tap (ky, kx) of output (y + p - ky d, x + p - kx d): the output
            // gradient correlated with the flipped filter.
            let ([lead_y, lead_x], [_, wide]) = (flipped.lead, flipped.ext);
            let kw = g.kernel[2];
            (0..taps)
                .map(|t| {
                    let (ky, kx) = (t / kw, t % kw);
                    let down = g.padding[1] + lead_y - ky * g.dilation[1];
                    (0.0, down * wide + g.padding[2] + lead_x - kx * g.dilation[2])
                })
                .collect()
        } else {
            layout.taps.iter().map(|&at| (0.0, at)).collect()
        };
        let furthest = offsets.iter().map(|&(_, at)| at).max().unwrap_or(0);
        // Plane `c` of sample `n` in a tensor of planes of `len` elements.
        let plane = |at: usize, n: usize, c: usize, len: usize| (at as *mut f32).wrapping_add((n * g.groups + c) * len);
        let weight = |c: usize, t: usize| unsafe { *(conv.weight as *const f32).add(c * taps + t) };
        // SAFETY (every access through `plane` and `weight`): inside the operands the launch
        // checked; a unit writes only its own channel's planes (its filter, for the weight
        // gradient).
        unsafe {
            for unit in units {
                match conv.op {
                    Conv::Forward => {
                        let (n, c) = (unit / g.groups, unit % g.groups);
                        fill(&g, layout, &mut buffer, plane(conv.input, n, c, pixels));
                        for (t, tap) in offsets.iter_mut().enumerate() {
                            tap.0 = weight(c, t);
                        }
                        let bias = if conv.bias == 0 { 0.0 } else { *(conv.bias as *const f32).add(c) };
                        let out = plane(conv.output, n, c, positions);
                        if narrow {
                            correlate_plane::<FMA>(&buffer, row, &offsets, furthest, bias, out, oh, ow, &mut scratch);
                        } else {
                            correlate::<FMA>(&buffer, g.stride[1] * row, &offsets, bias, out, oh, ow);
                        }
                    }
                    Conv::BackwardInput => {
                        // The buffer's zeros stay: every unit writes the same places.
                        let (n, c) = (unit / g.groups, unit % g.groups);
                        let ([lead_y, lead_x], [_, wide]) = (flipped.lead, flipped.ext);
                        let grad = plane(conv.output, n, c, positions);
                        for y in 0..oh {
                            let to = (y + lead_y) * wide + lead_x;
                            assert!(to + ow <= buffer.len(), "a row outside the buffer");
                            copy_row(grad.add(y * ow), buffer.as_mut_ptr().add(to), ow);
                        }
                        for (t, tap) in offsets.iter_mut().enumerate() {
                            tap.0 = weight(c, t);
                        }
                        let out = plane(conv.input, n, c, pixels);
                        if narrow {
                            correlate_plane::<FMA>(&buffer, wide, &offsets, furthest, 0.0, out, ih, iw, &mut scratch);
                        } else {
                            correlate::<FMA>(&buffer, wide, &offsets, 0.0, out, ih, iw);
                        }
                    }
                    _ => {
                        // Each tap's sum over every output of every sample: per ROWS rows, a
                        // vector of sums on each row (independent chains of multiply-adds),
                        // added into the tap's vector of float sums; those into the tap's
                        // double once per sample (thousands of positions in one float sum lose
                        // digits CPU's blocked products keep).
                        let c = unit;
                        let (mut totals, mut sums) = (vec![0.0f64; taps], vec![[0.0f32; L]; taps]);
                        let runs = ow.div_ceil(L);
                        // The last vector of a row may pass its end: there the gradient is
                        // zero, and what lies in the buffer (maybe an inf) is masked to zero.
                        let valid = ow - (runs - 1) * L;
                        let mut grads = vec![0.0f32; oh * runs * L]; // rows of `runs` vectors
                        for n in 0..g.batch {
                            fill(&g, layout, &mut buffer, plane(conv.input, n, c, pixels));
                            let grad = plane(conv.output, n, c, positions);
                            for y in 0..oh {
                                grads[y * runs * L..][..ow].copy_from_slice(std::slice::from_raw_parts(grad.add(y * ow), ow));
                            }
                            let reach = (oh - 1) * g.stride[1] * row + layout.taps.iter().max().unwrap() + runs * L;
                            assert!(reach <= buffer.len(), "a tap outside the padded plane");
                            // A few rows at a time, every tap over them while they are in L1.
                            let mut y = 0;
                            while y < oh {
                                let group = if oh - y >= ROWS { ROWS } else { 1 };
                                let gs = &grads[y * runs * L..(y + group) * runs * L];
                                for (sum, &off) in sums.iter_mut().zip(&layout.taps) {
                                    let from = y * g.stride[1] * row + off;
                                    // SAFETY: the assert above.
                                    let rows = if group == ROWS {
                                        rows_dot::<FMA, ROWS>(&buffer, from, g.stride[1] * row, gs, valid)
                                    } else {
                                        rows_dot::<FMA, 1>(&buffer, from, g.stride[1] * row, gs, valid)
                                    };
                                    for l in 0..L {
                                        sum[l] += rows[l];
                                    }
                                }
                                y += group;
                            }
                            for (total, sum) in totals.iter_mut().zip(sums.iter_mut()) {
                                *total += lanes_sum(std::mem::replace(sum, [0.0; L]));
                            }
                        }
                        for (t, total) in totals.iter().enumerate() {
                            *(conv.weight as *mut f32).add(c * taps + t) = *total as f32;
                        }
                    }
                }
            }
        }
    }

    /// Σ gradient · input over `R` rows (`step` apart in `buffer` from `from`; `grads` holds
    /// them, `grads.len() / R / L` vectors each, of which the last has `valid` lanes): a vector
    /// of float sums per row (independent chains, in registers), returned added lane by lane.
    ///
    /// # Safety
    /// Every row's vectors lie inside `buffer`.
    #[inline(always)]
    unsafe fn rows_dot<const FMA: bool, const R: usize>(buffer: &[f32], from: usize, step: usize, grads: &[f32],
                                                       valid: usize) -> [f32; L] {
        let runs = grads.len() / R / L;
        assert!(runs > 0 && grads.len() == R * runs * L, "rows of whole vectors");
        let mut sums = [[0.0f32; L]; R];
        let whole = if valid == L { runs } else { runs - 1 };
        for run in 0..whole {
            for (r, sum) in sums.iter_mut().enumerate() {
                // SAFETY: vector run of row r lies in `grads` (its length is R rows of `runs`); the
                // caller's promise for `buffer`.
                let gv = unsafe { &*(grads.as_ptr().add((r * runs + run) * L) as *const [f32; L]) };
                let xs = unsafe { &*(buffer.as_ptr().add(from + r * step + run * L) as *const [f32; L]) };
                for l in 0..L {
                    sum[l] = mul_add::<FMA>(gv[l], xs[l], sum[l]);
                }
            }
        }
        if whole < runs {
            // The last vector, its lanes past the row's end masked to zero.
            for (r, sum) in sums.iter_mut().enumerate() {
                // SAFETY: vector whole of row r lies in `grads` (its length is R rows of `runs`); the
                // caller's promise for `buffer`.
                let gv = unsafe { &*(grads.as_ptr().add((r * runs + whole) * L) as *const [f32; L]) };
                let xs = unsafe { &*(buffer.as_ptr().add(from + r * step + whole * L) as *const [f32; L]) };
                for l in 0..L {
                    let x = xs[l]; // loaded in every lane, so that the choice is a vector select
                    sum[l] = mul_add::<FMA>(gv[l], if l < valid { x } else { 0.0 }, sum[l]);
                }
            }
        }
        let mut v = sums[0];
        for sum in &sums[1..] {
            for l in 0..L {
                v[l] += sum[l];
            }
        }
        v
    }

    /// A vector's lanes added pairwise, in float, as a double.
    #[inline(always)]
    fn lanes_sum(mut v: [f32; L]) -> f64 {
        let mut width = L;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                v[l] += v[l + width];
            }
        }
        v[0] as f64
    }

    /// Copies `n` floats from `from` to `to` (which do not overlap): a short row in two
    /// overlapping vector moves, inline (a call to `memcpy` per row of a 7x7 plane costs as
    /// much as the row's taps).
    ///
    /// # Safety
    /// `from` and `to` hold `n` floats each.
    #[inline(always)]
    unsafe fn copy_row(from: *const f32, to: *mut f32, n: usize) {
        unsafe {
            match n {
                8..=16 => {
                    let (head, tail) = (from.cast::<[f32; 8]>().read_unaligned(), from.add(n - 8).cast::<[f32; 8]>().read_unaligned());
                    to.cast::<[f32; 8]>().write_unaligned(head);
                    to.add(n - 8).cast::<[f32; 8]>().write_unaligned(tail);
                }
                4..8 => {
                    let (head, tail) = (from.cast::<[f32; 4]>().read_unaligned(), from.add(n - 4).cast::<[f32; 4]>().read_unaligned());
                    to.cast::<[f32; 4]>().write_unaligned(head);
                    to.add(n - 4).cast::<[f32; 4]>().write_unaligned(tail);
                }
                0..4 => {
                    for i in 0..n {
                        *to.add(i) = *from.add(i);
                    }
                }
                _ => std::ptr::copy_nonoverlapping(from, to, n),
            }
        }
    }

    /// The padded plane of [`Layout`], one channel: the input's rows in place, in a buffer
    /// whose other elements are zeros (every plane's rows go to the same places).
    ///
    /// # Safety
    /// `input` is a plane of `g.pixels()` elements.
    #[inline(always)]
    unsafe fn fill(g: &Geometry, layout: &Layout, buffer: &mut [f32], input: *const f32) {
        let width = g.input[2];
        layout.for_each_input_row(g, |to, from| {
            assert!(to + width <= buffer.len(), "a row outside the padded plane");
            // SAFETY: the caller's promise for `input`; the assert for `buffer`.
            unsafe { copy_row(input.add(from), buffer.as_mut_ptr().add(to), width) };
        });
    }

    /// `out[y * width + x] = init + Σ w · buffer[y * step + x + offset]` over the taps
    /// `(w, offset)`, for `rows` rows of `width >= L` outputs: a vector of consecutive outputs
    /// on each of [`ROWS`] rows in registers while the taps pass over them. A row's (or the
    /// plane's) last run ends at its end, recomputing a few outputs rather than leaving a
    /// remainder.
    ///
    /// # Safety
    /// `out` is `rows * width` elements.
    #[inline(always)]
    unsafe fn correlate<const FMA: bool>(buffer: &[f32], step: usize, taps: &[(f32, usize)], init: f32, out: *mut f32,
                                         rows: usize, width: usize) {
        let reach = taps.iter().map(|&(_, offset)| offset).max().unwrap_or(0) + (width - 1) + 1;
        let mut y = 0;
        while y < rows {
            // Fewer rows than ROWS: one at a time; else the last group overlaps the one before.
            let (at, group) = if rows < ROWS { (y, 1) } else { (y.min(rows - ROWS), ROWS) };
            assert!((at + group - 1) * step + reach <= buffer.len(), "a tap outside the padded plane");
            let mut x = 0;
            while x < width {
                let run = x.min(width - L);
                // SAFETY: the assert above (the last row's furthest tap ends inside the buffer);
                // `out` is the caller's.
                unsafe {
                    let (from, to) = (at * step + run, out.add(at * width + run));
                    if group == ROWS {
                        run_of::<FMA, ROWS>(buffer, from, step, taps, init, to, width);
                    } else {
                        run_of::<FMA, 1>(buffer, from, step, taps, init, to, width);
                    }
                }
                x = run + L;
            }
            y = at + group;
        }
    }

    /// [`correlate`] for rows narrower than a vector: the plane's rows, `step` apart in
    /// `buffer`, are one run of `(rows - 1) * step + width` outputs, of which those between rows
    /// (in the padding) are computed and dropped. The runs go to `scratch`, then the rows to `out`.
    ///
    /// # Safety
    /// `out` is `rows * width` elements; no tap's offset passes `furthest`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn correlate_plane<const FMA: bool>(buffer: &[f32], step: usize, taps: &[(f32, usize)], furthest: usize,
                                               init: f32, out: *mut f32, rows: usize, width: usize, scratch: &mut [f32]) {
        let vectors = ((rows - 1) * step + width).div_ceil(L);
        debug_assert!(taps.iter().all(|&(_, offset)| offset <= furthest));
        assert!(furthest + vectors * L <= buffer.len() && vectors * L <= scratch.len(), "a tap outside the padded plane");
        let mut v = 0;
        // SAFETY: the assert above; `out` is the caller's.
        unsafe {
            while v < vectors {
                // Up to 8 vectors of sums in registers: independent chains of multiply-adds,
                // as many as are left (a chain of a plane's taps alone waits on each one).
                let to = scratch.as_mut_ptr().add(v * L);
                let at = v * L;
                v += match vectors - v {
                    1 => run_of::<FMA, 1>(buffer, at, L, taps, init, to, L),
                    2 => run_of::<FMA, 2>(buffer, at, L, taps, init, to, L),
                    3 => run_of::<FMA, 3>(buffer, at, L, taps, init, to, L),
                    4 => run_of::<FMA, 4>(buffer, at, L, taps, init, to, L),
                    5 => run_of::<FMA, 5>(buffer, at, L, taps, init, to, L),
                    _ => run_of::<FMA, 6>(buffer, at, L, taps, init, to, L),
                };
            }
            for y in 0..rows {
                copy_row(scratch.as_ptr().add(y * step), out.add(y * width), width);
            }
        }
    }

    /// Output rows taken together by [`correlate`]: each tap's weight, loaded once, serves a
    /// vector on each of them.
    const ROWS: usize = 4;

    /// A vector of outputs on each of `R` rows (`step` apart in `buffer`, `width` apart in
    /// `out`), from `buffer[at..]`.
    ///
    /// # Safety
    /// Every tap of every row reads inside `buffer`; `out` is the caller's.
    #[inline(always)]
    unsafe fn run_of<const FMA: bool, const R: usize>(buffer: &[f32], at: usize, step: usize, taps: &[(f32, usize)],
                                                     init: f32, out: *mut f32, width: usize) -> usize {
        let mut sums = [[init; L]; R];
        for &(w, offset) in taps {
            for (r, sum) in sums.iter_mut().enumerate() {
                // SAFETY: the caller's promise.
                let xs = unsafe { &*(buffer.as_ptr().add(at + r * step + offset) as *const [f32; L]) };
                for i in 0..L {
                    sum[i] = mul_add::<FMA>(w, xs[i], sum[i]);
                }
            }
        }
        for (r, sum) in sums.iter().enumerate() {
            unsafe { std::ptr::copy_nonoverlapping(sum.as_ptr(), out.add(r * width), L) };
        }
        R
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_transposes_as_element_by_element() {
        let rows: [Lanes; L] = std::array::from_fn(|i| std::array::from_fn(|j| (i * L + j) as f32));
        let out = transpose(&rows);
        for i in 0..L {
            for j in 0..L {
                assert_eq!(out[j][i], rows[i][j], "element ({i}, {j})");
            }
        }
    }

    #[test]
    fn planes_go_into_lanes_and_back_with_a_partial_block_and_missing_channels() {
        // 3 planes of 37 elements: two whole blocks of 16 positions and a tail of 5.
        let planes: Vec<Vec<f32>> = (0..3).map(|c| (0..37).map(|p| (c * 100 + p) as f32).collect()).collect();
        let from: Vec<*const f32> = planes.iter().map(|p| p.as_ptr()).collect();
        let mut lanes = Vec::new();
        // SAFETY: each plane holds 37 floats.
        unsafe { to_lanes(&from, 37, &mut lanes) };
        assert_eq!(lanes.len(), 37);
        for (p, v) in lanes.iter().enumerate() {
            assert_eq!(v[..3], [p as f32, (100 + p) as f32, (200 + p) as f32]);
            assert!(v[3..].iter().all(|&x| x == 0.0), "lanes past the last channel are zero");
        }
        let mut back = vec![vec![0.0f32; 37]; 3];
        let to: Vec<*mut f32> = back.iter_mut().map(|p| p.as_mut_ptr()).collect();
        // SAFETY: each plane holds 37 floats.
        unsafe { from_lanes(&lanes, &to) };
        assert_eq!(back, planes);
    }
}
