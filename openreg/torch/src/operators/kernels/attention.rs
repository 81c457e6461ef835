//! Scaled dot-product attention, forward and backward, a head at a time: the scores of every
//! query row against the keys (transposed, so that a row's scores are vectors along the keys),
//! each row's softmax and log-sum-exp (kept for the backward), then the products with the
//! values, in float32 whatever the dtype. Query heads that share a key/value head
//! (grouped-query attention) are one unit of work, so the key/value gradients of a group are
//! summed without races.

use std::borrow::Cow;

use openreg_runtime as rt;

use super::dtype::{self, Dtype, write};
use super::math::{dot, exp_with, mul_add};
#[cfg(target_arch = "x86_64")]
use super::softmax::{Simd, simd};
use super::thread_pool;
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::{AttentionShape, Dense};

/// Launches attention's forward or backward (`kernels/attention.rs`). Every float operand of
/// one dtype but the float32 log-sum-exp; the mask boolean or of the operands' dtype. False,
/// having done nothing, if a dtype is not ours.
pub(crate) fn launch_attention(backward: bool, shape: AttentionShape, operands: &[Dense], mask: Dense, device: i64) -> Result<bool> {
    let invalid = |what: String| Failure::from(rt::Error::InvalidValue(format!("attention: {what}")));
    let s = &shape;
    let dims = [s.batch, s.heads, s.kv_heads, s.query_len, s.key_len, s.head_dim, s.value_dim];
    if dims.iter().any(|&v| v < 0) || s.kv_heads == 0 || s.heads % s.kv_heads != 0 || s.mask_strides.iter().any(|&v| v < 0) {
        return Err(invalid(format!("invalid shape {shape:?}")));
    }
    let [b, h, hkv, l, n, d, dv] = dims.map(|v| v as usize);
    let (q, k, v, o, lse) = (b * h * l * d, b * hkv * n * d, b * hkv * n * dv, b * h * l * dv, b * h * l);
    let sizes: &[usize] = if backward { &[q, k, v, o, q, k, v, o, lse] } else { &[o, lse, q, k, v] };
    // Operands at strides, as [batch, heads, rows, width]: their stride triple, and the shape.
    let strided = |i: usize| -> Option<(&[i64], [usize; 4])> {
        let (input, output) = (&s.input_strides, &s.output_strides);
        match (backward, i) {
            (false, 2) | (true, 4) => Some((&input[0..3], [b, h, l, d])),
            (false, 3) | (true, 5) => Some((&input[3..6], [b, hkv, n, d])),
            (false, 4) | (true, 6) => Some((&input[6..9], [b, hkv, n, dv])),
            (true, 3) => Some((&input[9..12], [b, h, l, dv])),
            (true, 7) => Some((&input[12..15], [b, h, l, dv])),
            (false, 0) | (true, 0) => Some((&output[0..3], [b, h, l, if backward { d } else { dv }])),
            (true, 1) => Some((&output[3..6], [b, hkv, n, d])),
            (true, 2) => Some((&output[6..9], [b, hkv, n, dv])),
            _ => None,
        }
    };
    let written = |i: usize| i < if backward { 3 } else { 1 };
    let lse_at = if backward { 8 } else { 1 };
    if operands.len() != sizes.len() {
        return Err(invalid(format!("{} operands expected, got {}", sizes.len(), operands.len())));
    }
    let Some(dtype) = Dtype::from_code(operands[0].dtype) else { return Ok(false) };
    let mut slots = Vec::with_capacity(sizes.len());
    for (i, (t, &size)) in operands.iter().zip(sizes).enumerate() {
        let want = if i == lse_at { Dtype::Float } else { dtype };
        if !t.dtype_is(want) {
            return Ok(false);
        }
        if t.numel != size {
            return Err(invalid(format!("operand {i} has {} elements, {size} expected", t.numel)));
        }
        let extent = match strided(i) {
            // The last element the strides reach, plus one.
            Some((st, shape)) if size > 0 => {
                if st.iter().any(|&v| v < 0) {
                    return Err(invalid(format!("negative strides {st:?}")));
                }
                // Threads write an output's rows side by side: none may overlap another.
                if written(i) && overlaps(&shape, st) {
                    return Err(invalid(format!("output {i}'s rows overlap (strides {st:?}, shape {shape:?})")));
                }
                shape[..3].iter().zip(st).map(|(&n, &st)| (n - 1) * st as usize).sum::<usize>() + shape[3]
            }
            _ => size,
        };
        slots.push((view(t.data, extent * want.size(), &[t.storage, t.storage_len])?, want));
    }
    let mask = if mask.data == 0 {
        None
    } else {
        let Some(mt) = Dtype::elementwise(mask.dtype).filter(|&m| m == Dtype::Bool || m == dtype) else { return Ok(false) };
        // The last element the strides reach, over [batch, heads, query_len, key_len].
        let extent = [b, h, l, n].iter().zip(s.mask_strides).map(|(&size, st)| size.saturating_sub(1) * st as usize).sum::<usize>() + 1;
        let empty = b * h * l * n == 0;
        Some((if empty { 0 } else { view(mask.data, extent * mt.size(), &[mask.storage, mask.storage_len])? }, mt))
    };
    if o == 0 && (!backward || k + v == 0) {
        return Ok(true);
    }
    let work = Attention { shape, slots, mask };
    launch(device, q + k + v + o, move || work.run(backward))?;
    Ok(true)
}

/// Whether rows of `shape[3]` elements, at `strides` over `shape[..3]`, overlap: sorted by
/// stride, each dimension must step past everything the dimensions below it span.
fn overlaps(shape: &[usize; 4], strides: &[i64]) -> bool {
    let mut dims: Vec<(usize, usize)> = (0..3).filter(|&d| shape[d] > 1).map(|d| (strides[d] as usize, shape[d])).collect();
    dims.sort_unstable();
    let mut span = shape[3];
    for (stride, size) in dims {
        if stride < span {
            return true;
        }
        span = stride * (size - 1) + span;
    }
    false
}

/// An operand: runtime address and dtype.
pub(crate) type Slot = (usize, Dtype);

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Attention {
    pub shape: AttentionShape,
    /// Forward: out, lse | q, k, v. Backward: dq, dk, dv | grad_out, q, k, v, out, lse.
    pub slots: Vec<Slot>,
    /// A boolean mask (false: masked out) or an additive bias, at `shape.mask_strides`.
    pub mask: Option<Slot>,
}

/// `x`'s `count` rows of `width` as rows of `padded` (a multiple of 16), zero past `width`:
/// the right-hand operand of [`products`].
fn padded_rows(x: &[f32], count: usize, width: usize, padded: usize) -> Cow<'_, [f32]> {
    if width == padded {
        return Cow::Borrowed(&x[..count * width]);
    }
    let mut out = vec![0f32; count * padded];
    for (o, row) in out.chunks_exact_mut(padded).zip(x.chunks_exact(width.max(1))) {
        o[..width].copy_from_slice(row);
    }
    Cow::Owned(out)
}

/// `x`'s `count` rows of `width` (`stride` apart) as `width` rows of `padded` (a multiple of
/// 16), zero past `count`: keys laid out so that a query row's products with all of them are
/// vectors along the keys, with no sum across a vector's lanes.
fn transposed(x: &[f32], count: usize, width: usize, stride: usize, padded: usize) -> Vec<f32> {
    let mut t = Vec::new();
    transpose_into(&mut t, x, count, width, stride, padded);
    t
}

/// [`transposed`] into `t`, whose room is kept from one head to the next.
fn transpose_into(t: &mut Vec<f32>, x: &[f32], count: usize, width: usize, stride: usize, padded: usize) {
    t.clear();
    t.resize(width * padded, 0.0);
    for j in 0..count {
        for (c, &v) in x[j * stride..j * stride + width].iter().enumerate() {
            t[c * padded + j] = v;
        }
    }
}

/// A left-hand operand: `rows` rows of `width` elements, `stride` apart.
#[derive(Clone, Copy)]
struct Lhs<'a> {
    data: &'a [f32],
    rows: usize,
    width: usize,
    stride: usize,
}

/// Which part of a product a causal mask leaves (row `r` of a head attends to keys `0..=r`):
/// what would be computed outside it is a product with zeros, or a score the softmax drops.
#[derive(Clone, Copy, PartialEq)]
enum Band {
    /// The whole product.
    Full,
    /// Row `r`'s columns `0..=r` only (scores: the rest are left unwritten).
    Columns,
    /// Row `r` sums over `t <= r` only (`a`'s row is zero past it: P and dS by query row).
    Prefix,
    /// Row `r` sums over `t >= r` only (`a`'s row is zero before it: P^T and dS^T by key).
    Suffix,
}

/// `out[r] = a[r] @ b` (or `+=` when `accumulate`) for every row of `a`, where `b` is
/// `a.width` rows of `cols` elements (a multiple of 16) and `out`'s rows are `cols` apart:
/// the matrix products of one head, small enough that packing them for gemm would cost more.
/// `band` skips what a causal mask makes zero, a block of rows at a time.
///
/// The block of sums held in registers fits the register file: 4 rows by 32 columns (8 of
/// AVX-512's 32 registers), 4 by 16 with AVX2 (8 of its 16; 4 by 32 would take all 16 and
/// spill, a third more time on a Zen 3 core).
#[inline(always)]
fn products<const FMA: bool, const WIDE: bool>(a: Lhs, b: &[f32], cols: usize, out: &mut [f32], accumulate: bool, band: Band) {
    assert!(cols % 16 == 0 && b.len() >= a.width * cols && out.len() >= a.rows * cols);
    assert!(a.rows == 0 || a.data.len() >= (a.rows - 1) * a.stride + a.width);
    if WIDE {
        blocks::<FMA, 4, 2>(a, b, cols, out, accumulate, band)
    } else {
        blocks::<FMA, 4, 1>(a, b, cols, out, accumulate, band)
    }
}

/// [`products`] by blocks of R rows and 16 C columns.
#[inline(always)]
fn blocks<const FMA: bool, const R: usize, const C: usize>(a: Lhs, b: &[f32], cols: usize, out: &mut [f32], accumulate: bool, band: Band) {
    let mut r = 0;
    while r + R <= a.rows {
        products_of_rows::<FMA, R, C>(a, r, b, cols, out, accumulate, band);
        r += R;
    }
    while r < a.rows {
        products_of_rows::<FMA, 1, C>(a, r, b, cols, out, accumulate, band);
        r += 1;
    }
}

/// [`products`] for rows `first..first + R`: R rows by 16 C columns of sums stay in
/// registers while the products run along the width (eight chains of multiply-adds keep both
/// of a core's units busy). Whole vectors are read and written (updating an array's lanes in
/// place compiled to scalar code).
#[inline(always)]
fn products_of_rows<const FMA: bool, const R: usize, const C: usize>(
    a: Lhs, first: usize, b: &[f32], cols: usize, out: &mut [f32], accumulate: bool, band: Band,
) {
    // The block's last row reaches furthest (columns, prefix); its first row starts earliest.
    let end = if band == Band::Columns { cols.min((first + R).next_multiple_of(16)) } else { cols };
    let span = match band {
        Band::Prefix => 0..a.width.min(first + R),
        Band::Suffix => first.min(a.width)..a.width,
        _ => 0..a.width,
    };
    let mut c = 0;
    while c + 16 * C <= end {
        columns::<FMA, R, C>(a, first, b, cols, c, out, accumulate, span.clone());
        c += 16 * C;
    }
    if c < end {
        columns::<FMA, R, 1>(a, first, b, cols, c, out, accumulate, span);
    }
}

#[inline(always)]
fn columns<const FMA: bool, const R: usize, const C: usize>(
    a: Lhs, first: usize, b: &[f32], cols: usize, c: usize, out: &mut [f32], accumulate: bool, span: std::ops::Range<usize>,
) {
    let mut sums = [[[0f32; 16]; C]; R];
    // SAFETY (every access): rows first..first + R of `a` and `out`, columns c..c + 16 C <=
    // cols of `b` and `out`, t in `span` (inside 0..a.width): inside the operands (asserted by
    // `products`).
    if accumulate {
        for (i, row) in sums.iter_mut().enumerate() {
            for (j, sum) in row.iter_mut().enumerate() {
                *sum = unsafe { *(out.as_ptr().add((first + i) * cols + c + 16 * j) as *const [f32; 16]) };
            }
        }
    }
    for t in span {
        let mut column = [[0f32; 16]; C];
        for (j, v) in column.iter_mut().enumerate() {
            *v = unsafe { *(b.as_ptr().add(t * cols + c + 16 * j) as *const [f32; 16]) };
        }
        for (i, row) in sums.iter_mut().enumerate() {
            let x = unsafe { *a.data.get_unchecked((first + i) * a.stride + t) };
            for (sum, v) in row.iter_mut().zip(&column) {
                let mut s = *sum;
                for l in 0..16 {
                    s[l] = mul_add::<FMA>(x, v[l], s[l]);
                }
                *sum = s;
            }
        }
    }
    for (i, row) in sums.iter().enumerate() {
        for (j, sum) in row.iter().enumerate() {
            unsafe { *(out.as_mut_ptr().add((first + i) * cols + c + 16 * j) as *mut [f32; 16]) = *sum };
        }
    }
}

/// The largest of `xs` (NaN if one is), in 16 lanes: a running maximum in one register is a
/// chain the compiler keeps scalar.
#[inline(always)]
fn lanes_max(xs: &[f32]) -> f32 {
    let pick = |m: f32, x: f32| if x > m || x.is_nan() { x } else { m };
    let (chunks, rest) = xs.as_chunks::<16>();
    let mut m = [f32::NEG_INFINITY; 16];
    for c in chunks {
        for l in 0..16 {
            m[l] = pick(m[l], c[l]);
        }
    }
    rest.iter().chain(&m).fold(f32::NEG_INFINITY, |a, &x| pick(a, x))
}

/// The sum of `xs` in 16 lanes (a sum in order is a chain the compiler keeps scalar).
#[inline(always)]
fn lanes_sum(xs: &[f32]) -> f32 {
    let (chunks, rest) = xs.as_chunks::<16>();
    let mut s = [0f32; 16];
    for c in chunks {
        for l in 0..16 {
            s[l] += c[l];
        }
    }
    s.iter().sum::<f32>() + rest.iter().sum::<f32>()
}


/// Which of `AttentionShape::input_strides`' five operands an input is.
#[derive(Clone, Copy)]
enum Input {
    Q = 0,
    K = 1,
    V = 2,
    GradOut = 3,
}

impl Attention {
    /// `count` rows of `width` elements of input `which` (slot `slot`), head `h` of sample
    /// `b`, gathered as float32.
    ///
    /// # Safety
    /// The launch checked the rows' extent.
    #[inline(always)]
    unsafe fn rows(&self, slot: usize, which: Input, b: usize, h: usize, count: usize, width: usize) -> Vec<f32> {
        let st = &self.shape.input_strides[which as usize * 3..which as usize * 3 + 3];
        let (ptr, dt) = self.slots[slot];
        let base = b as i64 * st[0] + h as i64 * st[1];
        let mut out = vec![0f32; count * width];
        for (r, row) in out.chunks_exact_mut(width.max(1)).enumerate() {
            let at = (base + r as i64 * st[2]) as usize;
            unsafe { dtype::load(dt, (ptr + at * dt.size()) as *const u8, dt.size() as isize, row) };
        }
        out
    }

    /// `rows` rows of `width` elements of `values` (`stride` apart) into output `slot`, head
    /// `h` of sample `b`, at the output's strides.
    ///
    /// # Safety
    /// The launch checked the output's extent for these strides.
    #[inline(always)]
    unsafe fn write_rows(&self, slot: usize, b: usize, h: usize, rows: usize, width: usize, values: &[f32], stride: usize, scratch: &mut Vec<f32>) {
        let st = &self.shape.output_strides[slot * 3..slot * 3 + 3];
        let base = b as i64 * st[0] + h as i64 * st[1];
        for r in 0..rows {
            let row = &values[r * stride..r * stride + width];
            unsafe { write(self.slots[slot], (base + r as i64 * st[2]) as usize, width, scratch, |o| o.copy_from_slice(row)) };
        }
    }

    fn dims(&self) -> [usize; 7] {
        let s = &self.shape;
        [s.batch, s.heads, s.kv_heads, s.query_len, s.key_len, s.head_dim, s.value_dim].map(|v| v.max(0) as usize)
    }

    /// How many keys row `i` attends to: all, or `0..=i` when causal (top left aligned, as
    /// `is_causal` is in `torch/nn/functional.py`'s reference).
    #[inline(always)]
    fn live(&self, i: usize) -> usize {
        let keys = self.dims()[4];
        if self.shape.causal { keys.min(i + 1) } else { keys }
    }

    /// The first keys of row `i` of head `h` of sample `b`, given `q . k_j`: scaled, plus the
    /// mask. Keys a causal mask drops are not among them ([`Self::live`]).
    #[inline(always)]
    fn scores(&self, b: usize, h: usize, i: usize, scores: &mut [f32], mask_row: &mut Vec<f32>) {
        let keys = scores.len();
        let scale = self.shape.scale as f32;
        for s in scores.iter_mut() {
            *s *= scale;
        }
        if let Some((ptr, dt)) = self.mask {
            let st = self.shape.mask_strides;
            let at = b as i64 * st[0] + h as i64 * st[1] + i as i64 * st[2];
            mask_row.resize(keys, 0.0);
            // SAFETY: the launch checked the mask's extent for these strides.
            unsafe { dtype::load(dt, (ptr + at as usize * dt.size()) as *const u8, st[3] as isize * dt.size() as isize, mask_row) };
            for (s, &m) in scores.iter_mut().zip(mask_row.iter()) {
                *s = if dt == Dtype::Bool { if m != 0.0 { *s } else { f32::NEG_INFINITY } } else { *s + m };
            }
        }
    }

    /// The parts of the products a causal mask leaves: by query row and key (scores), by query
    /// row over keys (P V, dS K), by key over query rows (dS^T Q, P^T dO).
    fn bands(&self) -> (Band, Band, Band) {
        if self.shape.causal { (Band::Columns, Band::Prefix, Band::Suffix) } else { (Band::Full, Band::Full, Band::Full) }
    }

    pub(crate) fn run(&self, backward: bool) {
        let [batch, heads, kv_heads, _, _, _, _] = self.dims();
        let [.., rows, keys, d, dv] = self.dims();
        let units = batch * kv_heads;
        // Multiply-adds per unit: the group's scores and products (the backward does about twice).
        let per_unit = heads / kv_heads.max(1) * rows.max(1) * keys.max(1) * (d + dv);
        let parts = thread_pool::threads().min((units * per_unit).div_ceil(1 << 15)).min(units).max(1);
        thread_pool::run(parts, |p| {
            let units = thread_pool::share(p, parts, units);
            // SAFETY: a unit writes only its own heads' rows (and its key/value head's
            // gradients); the launch checked every operand's size. The CPU has the features
            // simd() found.
            unsafe {
                #[cfg(target_arch = "x86_64")]
                match simd() {
                    Simd::Avx512 => return self.units_avx512(units, backward),
                    Simd::Avx2 => return self.units_avx2(units, backward),
                    Simd::Baseline => {}
                }
                self.units::<false, false>(units, backward)
            }
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn units_avx512(&self, units: std::ops::Range<usize>, backward: bool) {
        unsafe { self.units::<true, true>(units, backward) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn units_avx2(&self, units: std::ops::Range<usize>, backward: bool) {
        unsafe { self.units::<true, false>(units, backward) }
    }

    /// `WIDE`: blocks of sums for AVX-512's register file ([`products`]).
    ///
    /// # Safety
    /// As for the units' functions.
    #[inline(always)]
    unsafe fn units<const FMA: bool, const WIDE: bool>(&self, units: std::ops::Range<usize>, backward: bool) {
        for unit in units {
            unsafe {
                if backward { self.backward_unit::<FMA, WIDE>(unit) } else { self.forward_unit::<FMA, WIDE>(unit) }
            }
        }
    }

    /// Every query head of key/value head `unit % kv_heads` of sample `unit / kv_heads`:
    /// S = Q K^T, P = softmax(S) a row at a time, O = P V.
    #[inline(always)]
    unsafe fn forward_unit<const FMA: bool, const WIDE: bool>(&self, unit: usize) {
        let [_, heads, kv_heads, rows, keys, d, dv] = self.dims();
        let (b, g) = (unit / kv_heads, unit % kv_heads);
        let group = heads / kv_heads;
        let lse = self.slots[1];
        let (np, dvp) = (keys.next_multiple_of(16), dv.next_multiple_of(16));
        let band = self.bands();
        let (mut s, mut o) = (vec![0f32; rows * np], vec![0f32; rows * dvp]);
        let (mut mask_row, mut ob) = (Vec::new(), Vec::new());
        unsafe {
            let kt = transposed(&self.rows(3, Input::K, b, g, keys, d), keys, d, d, np);
            let v_rows = self.rows(4, Input::V, b, g, keys, dv);
            let v = padded_rows(&v_rows, keys, dv, dvp);
            for h in g * group..(g + 1) * group {
                let head = b * heads + h;
                let q = self.rows(2, Input::Q, b, h, rows, d);
                products::<FMA, WIDE>(Lhs { data: &q, rows, width: d, stride: d }, &kt, np, &mut s, false, band.0);
                let mut lse_rows = vec![0f32; rows];
                for i in 0..rows {
                    let (scores, dropped) = s[i * np..i * np + keys].split_at_mut(self.live(i));
                    dropped.fill(0.0); // P = 0, read by the product with V
                    self.scores(b, h, i, scores, &mut mask_row);
                    let max = lanes_max(scores);
                    if max == f32::NEG_INFINITY {
                        // Every key masked: the math path's softmax gives NaN.
                        scores.fill(0.0);
                        lse_rows[i] = f32::NEG_INFINITY;
                        continue;
                    }
                    for x in scores.iter_mut() {
                        *x = exp_with::<FMA>(*x - max);
                    }
                    let total = lanes_sum(scores);
                    // P normalised here, so that O = P V needs no pass of its own.
                    let inverse = 1.0 / total;
                    scores.iter_mut().for_each(|x| *x *= inverse);
                    lse_rows[i] = max + total.ln();
                }
                products::<FMA, WIDE>(Lhs { data: &s, rows, width: keys, stride: np }, &v, dvp, &mut o, false, band.1);
                for (i, &l) in lse_rows.iter().enumerate() {
                    if l == f32::NEG_INFINITY {
                        o[i * dvp..(i + 1) * dvp].fill(f32::NAN);
                    }
                }
                self.write_rows(0, b, h, rows, dv, &o, dvp, &mut ob);
                let lse_out = std::slice::from_raw_parts_mut((lse.0 as *mut f32).add(head * rows), rows);
                lse_out.copy_from_slice(&lse_rows);
            }
        }
    }

    /// The gradients of one unit (as [`Self::forward_unit`]): P again from the log-sum-exp,
    /// dP = dO V^T, dS = P (dP - rowsum(P dP)), then dQ = dS K, dK = dS^T Q and dV = P^T dO,
    /// dK and dV summed over the query heads of the group.
    #[inline(always)]
    unsafe fn backward_unit<const FMA: bool, const WIDE: bool>(&self, unit: usize) {
        let [_, heads, kv_heads, rows, keys, d, dv] = self.dims();
        let (b, g) = (unit / kv_heads, unit % kv_heads);
        let group = heads / kv_heads;
        let lse = self.slots[8];
        let scale = self.shape.scale as f32;
        let (np, dp, dvp) = (keys.next_multiple_of(16), d.next_multiple_of(16), dv.next_multiple_of(16));
        let band = self.bands();
        let mut mask_row = Vec::new();
        let (mut s, mut d_p) = (vec![0f32; rows * np], vec![0f32; rows * np]);
        let (mut gq, mut gk, mut gv) = (vec![0f32; rows * dp], vec![0f32; keys * dp], vec![0f32; keys * dvp]);
        let (mut scratch, mut d_s_t, mut p_t) = (Vec::new(), Vec::new(), Vec::new());
        unsafe {
            let k = self.rows(5, Input::K, b, g, keys, d);
            let v = self.rows(6, Input::V, b, g, keys, dv);
            let (kt, vt, k_rows) = (transposed(&k, keys, d, d, np), transposed(&v, keys, dv, dv, np), padded_rows(&k, keys, d, dp));
            for h in g * group..(g + 1) * group {
                let head = b * heads + h;
                let q = self.rows(4, Input::Q, b, h, rows, d);
                let grad = self.rows(3, Input::GradOut, b, h, rows, dv);
                let lse_rows = std::slice::from_raw_parts((lse.0 as *const f32).add(head * rows), rows);
                products::<FMA, WIDE>(Lhs { data: &q, rows, width: d, stride: d }, &kt, np, &mut s, false, band.0);
                products::<FMA, WIDE>(Lhs { data: &grad, rows, width: dv, stride: dv }, &vt, np, &mut d_p, false, band.0);
                for i in 0..rows {
                    let live = self.live(i);
                    let (scores, dropped) = s[i * np..i * np + keys].split_at_mut(live);
                    dropped.fill(0.0);
                    self.scores(b, h, i, scores, &mut mask_row);
                    for x in scores.iter_mut() {
                        *x = exp_with::<FMA>(*x - lse_rows[i]); // P, the forward's probabilities
                    }
                    let (d_s, dropped) = d_p[i * np..i * np + keys].split_at_mut(live);
                    dropped.fill(0.0);
                    let dot_sum = dot(scores, d_s);
                    // dS (scaled), in place of dP; P stays in `s`. A masked key has no gradient.
                    for (x, &p) in d_s.iter_mut().zip(scores.iter()) {
                        *x = if p == 0.0 { 0.0 } else { scale * p * (*x - dot_sum) };
                    }
                }
                products::<FMA, WIDE>(Lhs { data: &d_p, rows, width: keys, stride: np }, &k_rows, dp, &mut gq, false, band.1);
                self.write_rows(0, b, h, rows, d, &gq, dp, &mut scratch);
                // dK += dS^T Q, dV += P^T dO: the transposes have a row per key.
                let rp = rows.next_multiple_of(16);
                transpose_into(&mut d_s_t, &d_p, rows, keys, np, rp);
                transpose_into(&mut p_t, &s, rows, keys, np, rp);
                let (q_rows, grad_rows) = (padded_rows(&q, rows, d, dp), padded_rows(&grad, rows, dv, dvp));
                products::<FMA, WIDE>(Lhs { data: &d_s_t, rows: keys, width: rows, stride: rp }, &q_rows, dp, &mut gk, true, band.2);
                products::<FMA, WIDE>(Lhs { data: &p_t, rows: keys, width: rows, stride: rp }, &grad_rows, dvp, &mut gv, true, band.2);
            }
            self.write_rows(1, b, g, keys, d, &gk, dp, &mut scratch);
            self.write_rows(2, b, g, keys, dv, &gv, dvp, &mut scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instance of [`products`] (AVX-512's blocks and AVX2's, with and without FMA: the
    /// running machine executes each, whatever its own vector width) against a plain sum, for
    /// each band, with rows and columns that leave partial blocks, accumulating or not.
    #[test]
    fn products_match_a_plain_sum_in_every_band() {
        fn check(run: fn(Lhs, &[f32], usize, &mut [f32], bool, Band)) {
            for (rows, width, cols) in [(1, 1, 16), (7, 5, 48), (9, 33, 32), (13, 13, 16), (4, 20, 64)] {
                let a: Vec<f32> = (0..rows * width).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.25).collect();
                let b: Vec<f32> = (0..width * cols).map(|i| ((i * 5 % 13) as f32 - 6.0) * 0.5).collect();
                for band in [Band::Full, Band::Columns, Band::Prefix, Band::Suffix] {
                    for accumulate in [false, true] {
                        let start: Vec<f32> = (0..rows * cols).map(|i| (i % 3) as f32).collect();
                        // What the band leaves of `a`: zero where the caller's rows are zero.
                        let kept = |r: usize, t: usize| match band {
                            Band::Prefix => t <= r,
                            Band::Suffix => t >= r,
                            _ => true,
                        };
                        let a: Vec<f32> = (0..rows * width).map(|i| if kept(i / width, i % width) { a[i] } else { 0.0 }).collect();
                        let mut out = start.clone();
                        run(Lhs { data: &a, rows, width, stride: width }, &b, cols, &mut out, accumulate, band);
                        for r in 0..rows {
                            for c in 0..cols {
                                if band == Band::Columns && c > r {
                                    continue; // left unwritten: the caller drops these scores
                                }
                                let sum: f32 = (0..width).map(|t| a[r * width + t] * b[t * cols + c]).sum();
                                let want = sum + if accumulate { start[r * cols + c] } else { 0.0 };
                                let got = out[r * cols + c];
                                assert!((got - want).abs() <= 1e-4 * want.abs().max(1.0), "{rows}x{width}x{cols} {r},{c}: {got} vs {want}");
                            }
                        }
                    }
                }
            }
        }
        check(products::<true, true>);
        check(products::<true, false>);
        check(products::<false, true>);
        check(products::<false, false>);
    }

    #[test]
    fn dot_matches_a_plain_sum_at_every_length() {
        for n in 0..20 {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.25).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - want).abs() < 1e-4, "{n}");
        }
    }
}
