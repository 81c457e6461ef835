//! Dropout on the device: `native_dropout` (the mask and the scaled output in one pass) and
//! its backward. The mask comes from Philox numbers of the device's generator, as every
//! random operator's does (`random.rs`): element `i` compares word `i % 4` of block `i / 4`
//! with the keep probability, so any part of the tensor is drawn on its own, in parallel, and
//! a graph replay draws fresh numbers.

use openreg_runtime as rt;

use super::dtype::{self, Dtype};
use super::elementwise::parallel_min;
use super::philox::{self, LANES};
use super::{launch, view, dense};
use crate::error::Result;
use crate::ffi::ffi::Dense;
use crate::runtime::generator::Draw;
use crate::runtime::generator::PhiloxGenerator;

/// Launches dropout forward (`mask` written, `out = input * mask * scale`, the mask drawn
/// from `generator`) or backward (`mask` read, `out = grad * mask * scale`) over `n`
/// contiguous elements; `mask` is bool. False, having done nothing, if a dtype is not
/// float32, float16 or bfloat16.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_dropout(
    backward: bool, generator: &PhiloxGenerator, keep: f64, scale: f64, out: Dense, input: Dense, mask: Dense,
    device: i64,
) -> Result<bool> {
    dropout_with(backward, None, generator, keep, scale, out, input, mask, device)
}

/// [`launch_dropout`]'s forward with the numbers at `seed` and `offset` (fused attention keeps
/// them and draws the same mask again in its backward, as flash attention does).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_dropout_at(
    seed: u64, offset: u64, keep: f64, scale: f64, out: Dense, input: Dense, mask: Dense, device: i64,
) -> Result<bool> {
    let unused = PhiloxGenerator::unused();
    dropout_with(false, Some(Draw::Eager { seed, offset }), &unused, keep, scale, out, input, mask, device)
}

#[allow(clippy::too_many_arguments)]
fn dropout_with(
    backward: bool, draw: Option<Draw>, generator: &PhiloxGenerator, keep: f64, scale: f64, out: Dense, input: Dense,
    mask: Dense, device: i64,
) -> Result<bool> {
    const BOOL: i8 = 11; // c10::ScalarType::Bool
    let (Some(out_dtype), Some(in_dtype)) = (Dtype::from_code(out.dtype), Dtype::from_code(input.dtype)) else {
        return Ok(false);
    };
    let n = out.numel;
    if input.numel != n || mask.numel != n || mask.dtype != BOOL {
        return Err(rt::Error::InvalidValue(format!("dropout: {n} elements and a bool mask of as many expected")).into());
    }
    let stream = rt::current_stream(device)?;
    let draw = match draw {
        Some(draw) => draw,
        None if backward => Draw::Eager { seed: 0, offset: 0 },
        None => generator.reserve(4, stream)?,
    };
    let work = Dropout {
        backward, draw, keep: keep as f32, scale: scale as f32, n,
        out: (dense(&out, out_dtype)?, out_dtype),
        input: (dense(&input, in_dtype)?, in_dtype),
        mask: view(mask.data, n, &[mask.storage, mask.storage_len])?,
    };
    if n > 0 {
        launch(device, n, move || work.run())?;
    }
    Ok(true)
}

/// Elements converted to float32 at a time: whole Philox chunks of `LANES` blocks.
const BLOCK: usize = LANES * 4 * 16;

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Dropout {
    pub backward: bool,
    /// The forward's numbers (unused backward).
    pub draw: Draw,
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

impl Dropout {
    // ANCHOR: run
    pub(crate) fn run(&self) {
        let (seed, offset) = if self.backward { (0, 0) } else { self.draw.resolve() };
        // Parts start at multiples of BLOCK, so each part's Philox blocks start whole.
        parallel_min(self.n.div_ceil(BLOCK), 1 << 4, |start, count| {
            let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
            let mut bits = [[0u32; LANES]; 4];
            let end = ((start + count) * BLOCK).min(self.n);
            for first in (start * BLOCK..end).step_by(BLOCK) {
                let len = BLOCK.min(end - first);
                let (x, y) = (&mut x[..len], &mut y[..len]);
                // SAFETY: the launch checked `n` elements of each operand, one byte per mask
                // element; parts cover disjoint ranges.
                unsafe {
                    let at = |(base, dtype): (usize, Dtype)| (base + first * dtype.size()) as *mut u8;
                    dtype::load(self.input.1, at(self.input), self.input.1.size() as isize, x);
                    let mask = std::slice::from_raw_parts_mut((self.mask + first) as *mut u8, len);
                    if !self.backward {
                        for (c, mask) in mask.chunks_mut(LANES * 4).enumerate() {
                            philox::blocks(seed, offset, ((first / 4) + c * LANES) as u64, &mut bits);
                            for (e, m) in mask.iter_mut().enumerate() {
                                let u = (bits[e % 4][e / 4] >> 8) as f32 * (1.0 / 16_777_216.0);
                                *m = u8::from(u < self.keep);
                            }
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
