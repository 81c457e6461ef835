//! Dropout on the device: `native_dropout` (the mask and the scaled output in one pass) and
//! its backward. Each element's random number is a hash of the launch's seed and the element's
//! index — counter-based, as CUDA's Philox is — so any part of the tensor is drawn on its own,
//! in parallel, and the result does not depend on how the work is split. The seed is one
//! draw from the device's generator per launch (RandomOps.cpp), so `torch.manual_seed`
//! reproduces a run.

use super::dtype::{self, Dtype};
use super::elementwise::parallel;

/// Elements converted to float32 at a time.
const BLOCK: usize = 1024;

#[derive(Clone)] // a graph replays a captured kernel (the launch refuses captures: see kernels.rs)
pub(crate) struct Dropout {
    pub backward: bool,
    pub seed: u64,
    /// The probability of keeping an element, and what a kept one is multiplied by.
    pub keep: f32,
    pub scale: f32,
    pub n: usize,
    /// The output (forward) or grad_input (backward).
    pub out: (usize, Dtype),
    /// The input (forward) or grad_output (backward).
    pub input: (usize, Dtype),
    /// One byte per element (bool): written forward, read backward.
    pub mask: usize,
}

// ANCHOR: uniform
/// A number in [0, 1) for element `i`: SplitMix64's mixing of `seed + i * golden ratio`, its
/// top 24 bits as a float32 fraction (every float32 multiple of 2^-24 below 1 equally likely).
#[inline(always)]
pub(crate) fn uniform(seed: u64, i: u64) -> f32 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
}
// ANCHOR_END: uniform

impl Dropout {
    // ANCHOR: run
    pub(crate) fn run(&self) {
        parallel(self.n, |start, count| {
            let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
            for first in (start..start + count).step_by(BLOCK) {
                let len = BLOCK.min(start + count - first);
                let (x, y) = (&mut x[..len], &mut y[..len]);
                // SAFETY: the launch checked `n` elements of each operand, one byte per mask
                // element; parts cover disjoint ranges.
                unsafe {
                    let at = |(base, dtype): (usize, Dtype)| (base + first * dtype.size()) as *mut u8;
                    dtype::load(self.input.1, at(self.input), self.input.1.size() as isize, x);
                    let mask = std::slice::from_raw_parts_mut((self.mask + first) as *mut u8, len);
                    if !self.backward {
                        for (k, m) in mask.iter_mut().enumerate() {
                            *m = u8::from(uniform(self.seed, (first + k) as u64) < self.keep);
                        }
                    }
                    // As CPU computes it, input * mask * scale: a NaN stays NaN where dropped.
                    for ((y, &x), &m) in y.iter_mut().zip(x.iter()).zip(mask.iter()) {
                        *y = x * f32::from(m) * self.scale;
                    }
                    dtype::store(self.out.1, at(self.out), self.out.1.size() as isize, y);
                }
            }
        });
    }
    // ANCHOR_END: run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_numbers_cover_the_interval_evenly() {
        let n = 1 << 20;
        let mut buckets = [0usize; 16];
        let mut below = 0;
        for i in 0..n {
            let u = uniform(42, i);
            assert!((0.0..1.0).contains(&u));
            buckets[(u * 16.0) as usize] += 1;
            below += usize::from(u < 0.1);
        }
        for b in buckets {
            // 65536 expected per bucket; 5 standard deviations is about 1250.
            assert!((b as i64 - 65536).abs() < 1300, "{buckets:?}");
        }
        assert!((below as f64 / n as f64 - 0.1).abs() < 0.002);
        assert_ne!(uniform(1, 0), uniform(2, 0));
    }
}
