//! Random operators on the device: `uniform_`, `normal_`, `random_`, `bernoulli_`,
//! `exponential_`, `geometric_`, `log_normal_`, `cauchy_`, from Philox numbers
//! ([`super::philox`]). Element `i` takes its numbers from block `i / per_block` at the
//! launch's offset, so the result depends on the seed, the offset and the index only — never
//! on how the work is split over threads.

use std::f64::consts::PI;

use openreg_runtime as rt;

use super::dtype::{self, Dtype};
use super::elementwise::parallel_min;
use super::math;
use super::philox::{self, LANES};
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::{Dense, RandomOp};
use crate::runtime::generator::Draw;
use crate::runtime::generator::PhiloxGenerator;

// ANCHOR: launch_random
/// Launches a random operator over `out` (contiguous): `op` with parameters `a`, `b`
/// (from/to, mean/std, lambda, p, median/sigma) or `from`, `range` (integers; range 0 is all
/// of int64), drawing from `generator`. `p` is bernoulli's float32 probability tensor, read
/// and checked in [0, 1] before the launch (that waits for the stream, as CPU's check reads
/// the values). False, having done nothing, if the kernel does not write `out`'s dtype.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_random(
    op: RandomOp, a: f64, b: f64, from: i64, range: u64, out: Dense, p: Dense, generator: &PhiloxGenerator,
    device: i64,
) -> Result<bool> {
    use Distribution as D;
    let dist = match op {
        RandomOp::Uniform => D::Uniform { from: a, to: b },
        RandomOp::Normal => D::Normal { mean: a, std: b },
        RandomOp::LogNormal => D::LogNormal { mean: a, std: b },
        RandomOp::Exponential => D::Exponential { lambda: a },
        RandomOp::Geometric => D::Geometric { p: a },
        RandomOp::Cauchy => D::Cauchy { median: a, sigma: b },
        RandomOp::Bernoulli => D::Bernoulli { p: a },
        RandomOp::BernoulliTensor => D::BernoulliTensor { p: 0 },
        RandomOp::Integers => D::Integers { from, range },
        _ => return Ok(false),
    };
    let (Some(size), true) = (dtype::item_size(out.dtype), supported(dist, out.dtype)) else {
        return Ok(false);
    };
    let n = out.numel;
    let stream = rt::current_stream(device)?;
    let dist = match dist {
        D::BernoulliTensor { .. } => {
            const FLOAT: i8 = 6;
            if p.numel != n || p.dtype != FLOAT {
                return Err(rt::Error::InvalidValue(format!("bernoulli: {n} float32 probabilities expected")).into());
            }
            // The values are checked by the kernel, on the stream (see `Random::run`).
            D::BernoulliTensor { p: view(p.data, n * 4, &[p.storage, p.storage_len])? }
        }
        dist => dist,
    };
    if n == 0 {
        return Ok(true);
    }
    let data = view(out.data, n * size, &[out.storage, out.storage_len])?;
    let draw = generator.reserve(4, stream)?;
    let work = Random { dist, out: Output { data, numel: n, dtype: out.dtype }, draw };
    launch(device, n, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_random

/// `randperm(n)` into `out` (contiguous, `n` elements of an integer or float dtype that holds
/// `n - 1`, checked by the caller). False if the dtype is not one the kernels write.
pub(crate) fn launch_randperm(out: Dense, generator: &PhiloxGenerator, device: i64) -> Result<bool> {
    let n = out.numel;
    let Some(size) = dtype::item_size(out.dtype).filter(|_| matches!(out.dtype, 0..=4 | 6 | 7)) else {
        return Ok(false);
    };
    if n == 0 {
        return Ok(true);
    }
    let data = view(out.data, n * size, &[out.storage, out.storage_len])?;
    let stream = rt::current_stream(device)?;
    let draw = generator.reserve(4, stream)?;
    let code = out.dtype;
    launch(device, n, move || {
        let (seed, offset) = draw.resolve();
        let perm = permutation(n, seed, offset);
        // SAFETY: checked: n elements of `size` bytes at `data`.
        unsafe {
            match code {
                6 => std::slice::from_raw_parts_mut(data as *mut f32, n).iter_mut().zip(&perm).for_each(|(o, &v)| *o = v as f32),
                7 => std::slice::from_raw_parts_mut(data as *mut f64, n).iter_mut().zip(&perm).for_each(|(o, &v)| *o = v as f64),
                _ => store_perm(code, data, &perm),
            }
        }
    })?;
    Ok(true)
}

/// `samples` draws from each of `rows` distributions over `categories` (float64 `weights`,
/// contiguous) into `out` (int64, contiguous), on the stream. CPU raises for a bad distribution
/// (a negative, infinite or NaN weight, a row summing to 0), which needs the values: the kernel
/// checks them before it draws and reports a bad one at the stream's next synchronize.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_multinomial(
    weights: Dense, rows: i64, categories: i64, samples: i64, replacement: bool, out: Dense,
    generator: &PhiloxGenerator, device: i64,
) -> Result<()> {
    let [rows, categories, samples] = [rows, categories, samples].map(|v| v.max(0) as usize);
    if weights.numel != rows * categories || weights.dtype != 7 || out.numel != rows * samples || out.dtype != 4 {
        return Err(rt::Error::InvalidValue("multinomial: float64 weights and int64 output expected".into()).into());
    }
    if out.numel == 0 {
        return Ok(());
    }
    let stream = rt::current_stream(device)?;
    let w = view(weights.data, weights.numel * 8, &[weights.storage, weights.storage_len])?;
    let o = view(out.data, out.numel * 8, &[out.storage, out.storage_len])?;
    let (count, numel) = (weights.numel, out.numel);
    let draw = generator.reserve(4, stream)?;
    launch(device, count, move || {
        // SAFETY: both checked inside their storage by the launch.
        let w = unsafe { std::slice::from_raw_parts(w as *const f64, count) };
        if let Some(message) = invalid_distribution(w, categories, replacement) {
            return rt::fail_task(rt::FailureClass::Runtime, message.into());
        }
        let (seed, offset) = draw.resolve();
        let values = multinomial(w, rows, categories, samples, replacement, seed, offset);
        // SAFETY: `numel` int64 elements, checked inside out's storage by the launch.
        unsafe { std::slice::from_raw_parts_mut(o as *mut i64, numel) }.copy_from_slice(&values);
    })?;
    Ok(())
}

/// CPU's error for bad weights, if any. Its two paths check differently: with replacement each
/// row entry by entry (NaN fails `>= 0`), without it the whole tensor at once; both then reject
/// a row that sums to 0.
fn invalid_distribution(w: &[f64], categories: usize, replacement: bool) -> Option<&'static str> {
    const ZERO_SUM: &str = "invalid multinomial distribution (sum of probabilities <= 0)";
    if !replacement && w.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Some("probability tensor contains either `inf`, `nan` or element < 0");
    }
    for row in w.chunks(categories.max(1)) {
        for v in row.iter().filter(|_| replacement) {
            if !(*v >= 0.0) {
                return Some("invalid multinomial distribution (encountering probability entry < 0)");
            }
            if v.is_infinite() {
                return Some("invalid multinomial distribution (encountering probability entry = infinity or NaN)");
            }
        }
        if row.iter().sum::<f64>() <= 0.0 {
            return Some(ZERO_SUM);
        }
    }
    None
}

/// A distribution and its parameters, checked by PyTorch's templates before the launch
/// (`ATen/native/DistributionTemplates.h`, as CUDA's kernels use them).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Distribution {
    Uniform { from: f64, to: f64 },
    Normal { mean: f64, std: f64 },
    LogNormal { mean: f64, std: f64 },
    Exponential { lambda: f64 },
    Geometric { p: f64 },
    Cauchy { median: f64, sigma: f64 },
    Bernoulli { p: f64 },
    /// `p` per element: float32 values at this runtime address (checked in [0, 1]).
    BernoulliTensor { p: usize },
    /// `from + [0, range)`; `range` 0 means 2^64 (every int64).
    Integers { from: i64, range: u64 },
}

/// The output: its runtime address, element count and `c10::ScalarType` code.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub data: usize,
    pub numel: usize,
    pub dtype: i8,
}

const F64: i8 = 7;

/// 32-bit words each element takes: two where 32 random bits are too few (float64's 53-bit
/// fractions, integer ranges past 2^32).
pub(crate) fn words(dist: Distribution, dtype: i8) -> usize {
    match dist {
        Distribution::Integers { range, .. } => if range == 0 || range > 1 << 32 { 2 } else { 1 },
        Distribution::Bernoulli { .. } | Distribution::BernoulliTensor { .. } => 1,
        _ if dtype == F64 => 2,
        _ => 1,
    }
}

/// True if the kernel writes `dtype` for `dist`.
pub(crate) fn supported(dist: Distribution, dtype: i8) -> bool {
    let float = matches!(dtype, 5 | 6 | 7 | 15);
    let integer = matches!(dtype, 0..=4 | 11 | 27..=29);
    match dist {
        Distribution::Integers { .. } | Distribution::Bernoulli { .. } | Distribution::BernoulliTensor { .. } => {
            float || integer
        }
        Distribution::Geometric { .. } => float || integer,
        _ => float,
    }
}

/// Elements per chunk: the [`LANES`] blocks computed together.
fn chunk(words: usize) -> usize {
    LANES * 4 / words
}

// ANCHOR: kernel
#[derive(Clone)]
pub(crate) struct Random {
    pub dist: Distribution,
    pub out: Output,
    pub draw: Draw,
}

impl Random {
    pub(crate) fn run(&self) {
        if let Distribution::BernoulliTensor { p } = self.dist {
            // CPU rejects a probability outside [0, 1]; reading it needs the values, so the
            // check is the kernel's, reported at the stream's next synchronize.
            // SAFETY: `numel` float32 values, checked inside p's storage by the launch.
            let values = unsafe { std::slice::from_raw_parts(p as *const f32, self.out.numel) };
            if let Some(bad) = values.iter().find(|v| !(0.0..=1.0).contains(*v)) {
                let message = format!("Expected p_in >= 0 && p_in <= 1 to be true, but got false (a probability is {bad})");
                return rt::fail_task(rt::FailureClass::Runtime, message);
            }
        }
        let (seed, offset) = self.draw.resolve();
        let words = words(self.dist, self.out.dtype);
        let per_chunk = chunk(words);
        let chunks = self.out.numel.div_ceil(per_chunk);
        parallel_min(chunks, (1 << 15) / per_chunk, |start, count| {
            #[cfg(target_arch = "x86_64")]
            if !matches!(super::softmax::simd(), super::softmax::Simd::Baseline) {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { self.chunks_avx2(seed, offset, start..start + count) };
            }
            self.chunks::<false>(seed, offset, start..start + count)
        });
    }
    // ANCHOR_END: kernel

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunks_avx2(&self, seed: u64, offset: u64, chunks: std::ops::Range<usize>) {
        self.chunks::<true>(seed, offset, chunks)
    }

    #[inline(always)]
    fn chunks<const FMA: bool>(&self, seed: u64, offset: u64, chunks: std::ops::Range<usize>) {
        let words = words(self.dist, self.out.dtype);
        let per_chunk = chunk(words);
        let mut bits = [[0u32; LANES]; 4];
        let mut f32s = [0f32; LANES * 4];
        let mut f64s = [0f64; LANES * 4];
        let mut ints = [0i64; LANES * 4];
        for c in chunks {
            let first = c * per_chunk;
            let len = per_chunk.min(self.out.numel - first);
            philox::blocks(seed, offset, (c * LANES) as u64, &mut bits);
            // Element e of the chunk: block e / per_block, word (e % per_block) * words.
            let per_block = 4 / words;
            let word = |e: usize, k: usize| bits[(e % per_block) * words + k][e / per_block];
            match self.out.dtype {
                5 | 6 | 15 if words == 1 => {
                    self.values_f32::<FMA>(&bits, first, &mut f32s);
                    let dt = Dtype::from_code(self.out.dtype).expect("a float dtype");
                    // SAFETY: the launch checked `numel` elements of the output.
                    unsafe {
                        let at = (self.out.data + first * dt.size()) as *mut u8;
                        dtype::store(dt, at, dt.size() as isize, &f32s[..len]);
                    }
                }
                F64 => {
                    for (e, v) in f64s[..len].iter_mut().enumerate() {
                        *v = self.value_f64(word(e, 0), if words == 2 { word(e, 1) } else { 0 }, first + e, e, &bits);
                    }
                    // SAFETY: as above.
                    unsafe { std::slice::from_raw_parts_mut((self.out.data as *mut f64).add(first), len) }
                        .copy_from_slice(&f64s[..len]);
                }
                5 | 6 | 15 => {
                    for (e, v) in f32s[..len].iter_mut().enumerate() {
                        *v = self.value_f64(word(e, 0), word(e, 1), first + e, e, &bits) as f32;
                    }
                    let dt = Dtype::from_code(self.out.dtype).expect("a float dtype");
                    // SAFETY: as above.
                    unsafe {
                        let at = (self.out.data + first * dt.size()) as *mut u8;
                        dtype::store(dt, at, dt.size() as isize, &f32s[..len]);
                    }
                }
                code => {
                    for (e, v) in ints[..len].iter_mut().enumerate() {
                        *v = self.value_int(word(e, 0), if words == 2 { word(e, 1) } else { 0 }, first + e);
                    }
                    // SAFETY: as above.
                    unsafe { store_ints(code, self.out.data, first, &ints[..len]) };
                }
            }
        }
    }

    /// A chunk's values for float32, float16 and bfloat16 outputs (one word per element),
    /// written as loops over whole chunks so that they compile to SIMD code.
    #[inline(always)]
    fn values_f32<const FMA: bool>(&self, bits: &[[u32; LANES]; 4], first: usize, out: &mut [f32; LANES * 4]) {
        // Element 4l + w is word w of block l: four elements per block, as CUDA's kernels take
        // a curand4 result.
        let mut u = [0f32; LANES * 4];
        for l in 0..LANES {
            for w in 0..4 {
                u[4 * l + w] = unit(bits[w][l]);
            }
        }
        match self.dist {
            Distribution::Uniform { from, to } => {
                let (from, span, to) = (from as f32, (to - from) as f32, to as f32);
                for (o, &u) in out.iter_mut().zip(&u) {
                    let v = math::mul_add::<FMA>(u, span, from);
                    *o = if v >= to && span > 0.0 { from } else { v }; // [from, to), as CUDA reverses the bound
                }
            }
            Distribution::Normal { mean, std } | Distribution::LogNormal { mean, std } => {
                // Box-Muller on word pairs: (0, 1) -> elements 0 and 1 of a block, (2, 3) -> 2, 3.
                for l in 0..LANES {
                    for pair in [0, 2] {
                        let u1 = 1.0 - u[4 * l + pair]; // (0, 1]: ln stays finite
                        let r = (-2.0 * math::ln_with::<FMA>(u1)).sqrt();
                        let (s, c) = math::sincos_turns::<FMA>(u[4 * l + pair + 1]);
                        out[4 * l + pair] = r * c;
                        out[4 * l + pair + 1] = r * s;
                    }
                }
                let (mean, std) = (mean as f32, std as f32);
                for o in out.iter_mut() {
                    *o = math::mul_add::<FMA>(*o, std, mean);
                }
                if matches!(self.dist, Distribution::LogNormal { .. }) {
                    for o in out.iter_mut() {
                        *o = math::exp_with::<FMA>(*o);
                    }
                }
            }
            Distribution::Exponential { lambda } => {
                let scale = (-1.0 / lambda) as f32;
                for (o, &u) in out.iter_mut().zip(&u) {
                    *o = math::ln_with::<FMA>(1.0 - u) * scale;
                }
            }
            Distribution::Cauchy { median, sigma } => {
                let (median, sigma) = (median as f32, sigma as f32);
                for (o, &u) in out.iter_mut().zip(&u) {
                    // tan(pi (u - 1/2)) = sin / cos of (u - 1/2) / 2 turns.
                    let t = (u - 0.5) * 0.5;
                    let (s, c) = math::sincos_turns::<FMA>(if t < 0.0 { t + 1.0 } else { t });
                    *o = math::mul_add::<FMA>(s / c, sigma, median);
                }
            }
            Distribution::Geometric { p } => {
                let scale = (1.0 / (-p).ln_1p()) as f32;
                for (o, &u) in out.iter_mut().zip(&u) {
                    *o = (math::ln_with::<FMA>(1.0 - u) * scale).ceil().max(1.0);
                }
            }
            Distribution::Bernoulli { p } => {
                for (e, o) in out.iter_mut().enumerate() {
                    *o = f32::from(u8::from(word_unit(bits, e) < p));
                }
            }
            Distribution::BernoulliTensor { p } => {
                for (e, o) in out.iter_mut().enumerate() {
                    *o = f32::from(u8::from(word_unit(bits, e) < f64::from(self.p_at(p, first + e))));
                }
            }
            Distribution::Integers { from, range } => {
                for (e, o) in out.iter_mut().enumerate() {
                    *o = (from + lemire32(bits[e % 4][e / 4], range) as i64) as f32;
                }
            }
        }
    }

    /// One float64 value (two words `a`, `b` per element; `e` indexes the chunk).
    fn value_f64(&self, a: u32, b: u32, index: usize, e: usize, bits: &[[u32; LANES]; 4]) -> f64 {
        let u = unit53(a, b);
        match self.dist {
            Distribution::Uniform { from, to } => {
                let v = from + (to - from) * u;
                if v >= to && to > from { from } else { v }
            }
            Distribution::Normal { mean, std } | Distribution::LogNormal { mean, std } => {
                // Two elements per block: element 2l takes the cosine, 2l + 1 the sine.
                let l = e / 2;
                let u1 = 1.0 - unit53(bits[0][l], bits[1][l]);
                let u2 = unit53(bits[2][l], bits[3][l]);
                let r = (-2.0 * u1.ln()).sqrt();
                let (s, c) = (2.0 * PI * u2).sin_cos();
                let z = mean + std * r * if e % 2 == 0 { c } else { s };
                if matches!(self.dist, Distribution::LogNormal { .. }) { z.exp() } else { z }
            }
            Distribution::Exponential { lambda } => -(1.0 - u).ln() / lambda,
            Distribution::Cauchy { median, sigma } => median + sigma * (PI * (u - 0.5)).tan(),
            Distribution::Geometric { p } => ((1.0 - u).ln() / (-p).ln_1p()).ceil().max(1.0),
            Distribution::Bernoulli { p } => f64::from(u8::from(f64::from(a) / 4_294_967_296.0 < p)),
            Distribution::BernoulliTensor { p } => {
                f64::from(u8::from(f64::from(a) / 4_294_967_296.0 < f64::from(self.p_at(p, index))))
            }
            Distribution::Integers { from, range } => integer(from, range, a, b) as f64,
        }
    }

    /// One integer value (integer and bool outputs).
    fn value_int(&self, a: u32, b: u32, index: usize) -> i64 {
        let u = f64::from(a) / 4_294_967_296.0;
        match self.dist {
            Distribution::Integers { from, range } => integer(from, range, a, b),
            Distribution::Bernoulli { p } => i64::from(u < p),
            Distribution::BernoulliTensor { p } => i64::from(u < f64::from(self.p_at(p, index))),
            Distribution::Geometric { p } => ((1.0 - u).ln() / (-p).ln_1p()).ceil().max(1.0) as i64,
            _ => 0, // not launched (`supported`)
        }
    }

    fn p_at(&self, p: usize, index: usize) -> f32 {
        // SAFETY: the launch checked `numel` float32 probabilities at `p`.
        unsafe { *(p as *const f32).add(index) }
    }
}

/// A word as a float32 in [0, 1): its top 24 bits, so every multiple of 2^-24 is equally likely.
#[inline(always)]
fn unit(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Word `e % 4` of block `e / 4` as a float64 in [0, 1) with 32 bits (bernoulli's comparison).
#[inline(always)]
fn word_unit(bits: &[[u32; LANES]; 4], e: usize) -> f64 {
    f64::from(bits[e % 4][e / 4]) / 4_294_967_296.0
}

/// Two words as a float64 in [0, 1) with 53 bits.
#[inline(always)]
fn unit53(a: u32, b: u32) -> f64 {
    ((u64::from(a) << 32 | u64::from(b)) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// `[0, range)` from one word by a multiply and a shift (Lemire), for ranges up to 2^32.
#[inline(always)]
fn lemire32(w: u32, range: u64) -> u64 {
    (u64::from(w) * range) >> 32
}

/// `from + [0, range)`; two words for ranges past 2^32, every int64 for `range` 0.
fn integer(from: i64, range: u64, a: u32, b: u32) -> i64 {
    if range != 0 && range <= 1 << 32 {
        return from.wrapping_add(lemire32(a, range) as i64);
    }
    let x = u64::from(a) << 32 | u64::from(b);
    if range == 0 {
        return x as i64;
    }
    from.wrapping_add(((u128::from(x) * u128::from(range)) >> 64) as i64)
}

/// Writes integers as `code` elements (uint8, int8, int16, int32, int64, bool, uint16/32/64).
///
/// # Safety
/// The elements `first..first + values.len()` lie in the output.
unsafe fn store_ints(code: i8, data: usize, first: usize, values: &[i64]) {
    unsafe fn put<T: Copy>(data: usize, first: usize, values: &[i64], cast: impl Fn(i64) -> T) {
        let out = unsafe { std::slice::from_raw_parts_mut((data as *mut T).add(first), values.len()) };
        for (o, &v) in out.iter_mut().zip(values) {
            *o = cast(v);
        }
    }
    unsafe {
        match code {
            0 => put(data, first, values, |v| v as u8),
            1 => put(data, first, values, |v| v as i8),
            2 => put(data, first, values, |v| v as i16),
            3 => put(data, first, values, |v| v as i32),
            4 => put(data, first, values, |v| v),
            11 => put(data, first, values, |v| u8::from(v != 0)),
            27 => put(data, first, values, |v| v as u16),
            28 => put(data, first, values, |v| v as u32),
            29 => put(data, first, values, |v| v as u64),
            _ => {}
        }
    }
}

/// Writes a permutation as `code` integers.
///
/// # Safety
/// `data` holds `values.len()` elements of `code`.
pub(crate) unsafe fn store_perm(code: i8, data: usize, values: &[i64]) {
    unsafe { store_ints(code, data, 0, values) }
}

/// Shuffles `0..n` by sorting on random 64-bit keys (ties broken by index): a permutation
/// that depends on the seed and offset only, as CUDA's `randperm` sorts random keys.
pub(crate) fn permutation(n: usize, seed: u64, offset: u64) -> Vec<i64> {
    let key = philox::key(seed);
    let column = offset / 4;
    let mut keyed: Vec<(u64, i64)> = (0..n)
        .map(|i| {
            let g = i as u64;
            let w = philox::philox([g as u32, (g >> 32) as u32, column as u32, (column >> 32) as u32], key);
            (u64::from(w[0]) << 32 | u64::from(w[1]), i as i64)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// `samples` category indices from each row of `weights` (`rows` x `categories`, float64,
/// checked: finite, non-negative, each row's sum positive). With replacement: inverse of
/// the cumulative sum; without: the `samples` largest `ln(u)/w` keys (weighted reservoir
/// sampling, Efraimidis and Spirakis), which draws the same distribution as drawing one
/// category at a time and renormalising.
pub(crate) fn multinomial(
    weights: &[f64], rows: usize, categories: usize, samples: usize, replacement: bool, seed: u64, offset: u64,
) -> Vec<i64> {
    let key = philox::key(seed);
    let column = offset / 4;
    let uniform = |i: u64| {
        let w = philox::philox([i as u32, (i >> 32) as u32, column as u32, (column >> 32) as u32], key);
        unit53(w[0], w[1])
    };
    let mut out = Vec::with_capacity(rows * samples);
    for r in 0..rows {
        let row = &weights[r * categories..(r + 1) * categories];
        if replacement {
            let mut cumulative = Vec::with_capacity(categories);
            let mut total = 0.0;
            for &w in row {
                total += w;
                cumulative.push(total);
            }
            for s in 0..samples {
                let target = uniform((r * samples + s) as u64) * total;
                let mut k = cumulative.partition_point(|&c| c <= target).min(categories - 1);
                while row[k] == 0.0 && k > 0 {
                    k -= 1; // never a category of weight 0 (rounding at the top end)
                }
                out.push(k as i64);
            }
        } else {
            // Categories of weight 0 come last, in order, when the others run out (as on CPU).
            let mut keys: Vec<(f64, usize)> = row
                .iter()
                .enumerate()
                .map(|(k, &w)| {
                    let key = if w > 0.0 { (1.0 - uniform((r * categories + k) as u64)).ln() / w } else { f64::NEG_INFINITY };
                    (key, k)
                })
                .collect();
            keys.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            out.extend(keys.iter().take(samples).map(|&(_, k)| k as i64));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dist: Distribution, dtype: i8, n: usize) -> Vec<f64> {
        let mut f32s = vec![0f32; n];
        let mut f64s = vec![0f64; n];
        let data = if dtype == F64 { f64s.as_mut_ptr() as usize } else { f32s.as_mut_ptr() as usize };
        Random { dist, out: Output { data, numel: n, dtype }, draw: Draw::Eager { seed: 7, offset: 4 } }.run();
        if dtype == F64 { f64s } else { f32s.into_iter().map(f64::from).collect() }
    }

    fn moments(v: &[f64]) -> (f64, f64) {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        (mean, v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64)
    }

    #[test]
    fn uniform_and_normal_have_their_moments_in_both_widths() {
        for dtype in [6, F64] {
            let u = sample(Distribution::Uniform { from: -1.0, to: 3.0 }, dtype, 1 << 18);
            assert!(u.iter().all(|&x| (-1.0..3.0).contains(&x)));
            let (m, v) = moments(&u);
            assert!((m - 1.0).abs() < 0.02 && (v - 16.0 / 12.0).abs() < 0.02, "{m} {v}");
            let z = sample(Distribution::Normal { mean: 2.0, std: 0.5 }, dtype, 1 << 18);
            let (m, v) = moments(&z);
            assert!((m - 2.0).abs() < 0.01 && (v - 0.25).abs() < 0.01, "{m} {v}");
        }
    }

    #[test]
    fn sincos_in_turns_matches_the_library() {
        for i in 0..10_000 {
            let t = i as f32 / 10_000.0;
            let (s, c) = math::sincos_turns::<false>(t);
            let (ws, wc) = (2.0 * PI * f64::from(t)).sin_cos();
            assert!((f64::from(s) - ws).abs() < 1e-6 && (f64::from(c) - wc).abs() < 1e-6, "{t}");
        }
    }

    #[test]
    fn integers_cover_their_range_evenly() {
        let mut counts = [0usize; 6];
        let mut ints = vec![0i64; 60_000];
        let out = Output { data: ints.as_mut_ptr() as usize, numel: ints.len(), dtype: 4 };
        Random { dist: Distribution::Integers { from: -2, range: 6 }, out, draw: Draw::Eager { seed: 1, offset: 0 } }
            .run();
        for v in ints {
            counts[(v + 2) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (c as i64 - 10_000).abs() < 500), "{counts:?}");
    }

    #[test]
    fn a_permutation_holds_every_index_once() {
        let mut p = permutation(1000, 3, 8);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }
}
