//! Tensors filled from a formula rather than from inputs: `arange`'s `start + i * step` and an
//! integer `fill_`. Models build position ids and masks with them in every step.

use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// `arange` into a contiguous `out` (see `arange`). False if `out`'s dtype is not
/// one the kernel writes.
pub(crate) fn launch_arange(out: Dense, start: f64, step: f64, istart: i64, istep: i64, device: i64) -> Result<bool> {
    let size = element_size(out.dtype);
    if size == 0 || out.dtype == 11 {
        return Ok(false);
    }
    let data = view(out.data, out.numel * size, &[out.storage, out.storage_len])?;
    let (code, n) = (out.dtype, out.numel);
    // SAFETY: `data` is the checked view of `out`'s n elements.
    launch(device, n, move || unsafe { arange(code, data, n, start, step, istart, istep) })?;
    Ok(true)
}

/// An integer (or bool) `fill_` of a contiguous `out`. False if `out` is not an integer dtype.
pub(crate) fn launch_fill_int(out: Dense, value: i64, device: i64) -> Result<bool> {
    if !matches!(out.dtype, 0..=4 | 11 | 27..=29) {
        return Ok(false);
    }
    let size = element_size(out.dtype);
    let data = view(out.data, out.numel * size, &[out.storage, out.storage_len])?;
    let (code, n) = (out.dtype, out.numel);
    // SAFETY: `data` is the checked view of `out`'s n elements.
    launch(device, n, move || unsafe { fill_int(code, data, n, value) })?;
    Ok(true)
}

/// The size in bytes of an integer or floating-point dtype code (c10::ScalarType); 0 for the
/// codes these kernels do not write.
pub(crate) fn element_size(code: i8) -> usize {
    match code {
        0 | 1 | 11 => 1,        // uint8, int8, bool
        2 | 5 | 15 | 27 => 2,   // int16, half, bfloat16, uint16
        3 | 6 | 28 => 4,        // int32, float, uint32
        4 | 7 | 29 => 8,        // int64, double, uint64
        _ => 0,
    }
}

/// `out[i] = start + i * step` for `n` contiguous elements at `data`: integers computed exactly
/// in int64 (`istart`, `istep`), float64 in float64, float32 and below in float64 and rounded
/// once (CPU's accumulate type for float; for half and bfloat16 CPU accumulates in float32,
/// which rounds the same for the exact sizes arange produces).
///
/// # Safety
/// `data` holds `n` elements of `code`.
pub(crate) unsafe fn arange(code: i8, data: usize, n: usize, start: f64, step: f64, istart: i64, istep: i64) {
    unsafe fn put<T>(data: usize, n: usize, value: impl Fn(usize) -> T) {
        let out = unsafe { std::slice::from_raw_parts_mut(data as *mut T, n) };
        for (i, o) in out.iter_mut().enumerate() {
            *o = value(i);
        }
    }
    let int = |i: usize| istart.wrapping_add((i as i64).wrapping_mul(istep));
    let float = |i: usize| start + step * i as f64;
    unsafe {
        match code {
            0 => put(data, n, |i| int(i) as u8),
            1 => put(data, n, |i| int(i) as i8),
            2 => put(data, n, |i| int(i) as i16),
            3 => put(data, n, |i| int(i) as i32),
            4 => put(data, n, int),
            5 => put(data, n, |i| half::f16::from_f32((start as f32) + (step as f32) * i as f32)),
            6 => put(data, n, |i| float(i) as f32),
            7 => put(data, n, float),
            15 => put(data, n, |i| half::bf16::from_f32((start as f32) + (step as f32) * i as f32)),
            _ => {}
        }
    }
}

/// `value` written into `n` contiguous integer (or bool) elements at `data`.
///
/// # Safety
/// `data` holds `n` elements of `code`.
pub(crate) unsafe fn fill_int(code: i8, data: usize, n: usize, value: i64) {
    unsafe fn put<T: Copy>(data: usize, n: usize, value: T) {
        unsafe { std::slice::from_raw_parts_mut(data as *mut T, n) }.fill(value);
    }
    unsafe {
        match code {
            0 | 11 => put(data, n, value as u8),
            1 => put(data, n, value as i8),
            2 | 27 => put(data, n, value as i16),
            3 | 28 => put(data, n, value as i32),
            4 | 29 => put(data, n, value),
            _ => {}
        }
    }
}
