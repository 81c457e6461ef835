//! Copies that change dtype, on the stream: every pair of the real dtypes and bool, converted as
//! CPU's copy kernel converts (`torch/headeronly/util/TypeCast.h`). The elementwise kernels cover
//! the float32/float16/bfloat16 outputs; this covers the rest (float64, integers, bool).

use super::launch;
use super::view;
use super::walk::Layout;
use crate::error::Result;

/// A real dtype or bool, by its `c10::ScalarType` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    U8,
    I8,
    I16,
    I32,
    I64,
    F16,
    F32,
    F64,
    Bool,
    BF16,
}

impl Kind {
    pub(crate) fn from_code(code: i8) -> Option<Kind> {
        Some(match code {
            0 => Kind::U8,
            1 => Kind::I8,
            2 => Kind::I16,
            3 => Kind::I32,
            4 => Kind::I64,
            5 => Kind::F16,
            6 => Kind::F32,
            7 => Kind::F64,
            11 => Kind::Bool,
            15 => Kind::BF16,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Kind::U8 | Kind::I8 | Kind::Bool => 1,
            Kind::I16 | Kind::F16 | Kind::BF16 => 2,
            Kind::I32 | Kind::F32 => 4,
            Kind::I64 | Kind::F64 => 8,
        }
    }
}

/// One element on its way: floats exactly (as float64), integers exactly, or a bool.
#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
}

/// # Safety
/// `at` points to one element of `kind`.
unsafe fn read(kind: Kind, at: *const u8) -> Value {
    unsafe {
        match kind {
            Kind::U8 => Value::Int(i64::from(at.read())),
            Kind::I8 => Value::Int(i64::from((at as *const i8).read())),
            Kind::I16 => Value::Int(i64::from((at as *const i16).read_unaligned())),
            Kind::I32 => Value::Int(i64::from((at as *const i32).read_unaligned())),
            Kind::I64 => Value::Int((at as *const i64).read_unaligned()),
            Kind::F16 => Value::Float(f64::from(half::f16::from_bits((at as *const u16).read_unaligned()).to_f32())),
            Kind::BF16 => Value::Float(f64::from(half::bf16::from_bits((at as *const u16).read_unaligned()).to_f32())),
            Kind::F32 => Value::Float(f64::from((at as *const f32).read_unaligned())),
            Kind::F64 => Value::Float((at as *const f64).read_unaligned()),
            Kind::Bool => Value::Bool(at.read() != 0),
        }
    }
}

/// A float truncated toward zero, as x86's conversion instruction makes it: a NaN or a value
/// outside int64 gives int64's minimum (C++ leaves it undefined; Rust's `as` would saturate).
fn truncate(v: f64) -> i64 {
    if v.is_nan() || v >= 9.223_372_036_854_775_808e18 || v < -9.223_372_036_854_775_808e18 { i64::MIN } else { v as i64 }
}

/// # Safety
/// `at` points to one writable element of `kind`.
unsafe fn write(kind: Kind, at: *mut u8, value: Value) {
    // The narrower floats go through float32, as c10::Half and c10::BFloat16 convert.
    let as_f32 = |v: Value| match v {
        Value::Float(f) => f as f32,
        Value::Int(i) => i as f32,
        Value::Bool(b) => f32::from(u8::from(b)),
    };
    // Integers wrap, as C++ converts between them; floats truncate toward zero first, through
    // int64 (TypeCast.h does so for uint8; for the signed types a float out of their range is
    // undefined in C++, and here it wraps).
    let as_i64 = |v: Value| match v {
        Value::Float(f) => truncate(f),
        Value::Int(i) => i,
        Value::Bool(b) => i64::from(b),
    };
    unsafe {
        match kind {
            Kind::U8 => at.write(as_i64(value) as u8),
            Kind::I8 => (at as *mut i8).write(as_i64(value) as i8),
            Kind::I16 => (at as *mut i16).write_unaligned(as_i64(value) as i16),
            Kind::I32 => (at as *mut i32).write_unaligned(as_i64(value) as i32),
            Kind::I64 => (at as *mut i64).write_unaligned(as_i64(value)),
            Kind::F16 => (at as *mut u16).write_unaligned(half::f16::from_f32(as_f32(value)).to_bits()),
            Kind::BF16 => (at as *mut u16).write_unaligned(half::bf16::from_f32(as_f32(value)).to_bits()),
            Kind::F32 => (at as *mut f32).write_unaligned(as_f32(value)),
            Kind::F64 => (at as *mut f64).write_unaligned(match value {
                Value::Float(f) => f,
                Value::Int(i) => i as f64,
                Value::Bool(b) => f64::from(u8::from(b)),
            }),
            Kind::Bool => at.write(u8::from(match value {
                Value::Float(f) => f != 0.0, // NaN is true, as in C++
                Value::Int(i) => i != 0,
                Value::Bool(b) => b,
            })),
        }
    }
}

/// Queues the copy of `src` (dtype code `from`) into `dst` (`to`) over `layout` (output first),
/// both addresses checked against their storages. False if a dtype is not one of [`Kind`]'s.
pub(crate) fn launch_convert(
    layout: Layout, dst: (usize, &[usize]), src: (usize, &[usize]), to: i8, from: i8, device: i64,
) -> Result<bool> {
    let (Some(to), Some(from)) = (Kind::from_code(to), Kind::from_code(from)) else { return Ok(false) };
    let n = layout.numel();
    if n == 0 {
        return Ok(true);
    }
    let (out, input) = (view(dst.0, layout.extent(0, to.size()), dst.1)?, view(src.0, layout.extent(1, from.size()), src.1)?);
    launch(device, n, move || {
        let (os, is) = (layout.strides[0][0], layout.strides[0][1]);
        super::elementwise::parallel(n, |start, count| {
            layout.walk(start, count, |o, len| {
                for i in 0..len as isize {
                    // SAFETY: both extents were checked against live allocations at launch;
                    // parts cover disjoint elements of the output.
                    unsafe {
                        let value = read(from, (input as isize + o[1] + i * is) as *const u8);
                        write(to, (out as isize + o[0] + i * os) as *mut u8, value);
                    }
                }
            });
        });
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(from: Kind, bytes: &[u8], to: Kind) -> Vec<u8> {
        let mut out = vec![0u8; to.size()];
        unsafe { write(to, out.as_mut_ptr(), read(from, bytes.as_ptr())) };
        out
    }

    #[test]
    fn conversions_are_cpps() {
        // float -> integer truncates toward zero; uint8 wraps through int64.
        assert_eq!(convert(Kind::F32, &(-2.7f32).to_le_bytes(), Kind::I32), (-2i32).to_le_bytes());
        assert_eq!(convert(Kind::F32, &(-1.5f32).to_le_bytes(), Kind::U8), [255]);
        assert_eq!(convert(Kind::F64, &f64::NAN.to_le_bytes(), Kind::I64), i64::MIN.to_le_bytes());
        // integers wrap; bool is nonzero, NaN included.
        assert_eq!(convert(Kind::I64, &300i64.to_le_bytes(), Kind::I8), [44]);
        assert_eq!(convert(Kind::F32, &f32::NAN.to_le_bytes(), Kind::Bool), [1]);
        assert_eq!(convert(Kind::Bool, &[1], Kind::F64), 1f64.to_le_bytes());
        // int64 -> float32 rounds to nearest; float64 -> float16 goes through float32.
        assert_eq!(convert(Kind::I64, &16_777_217i64.to_le_bytes(), Kind::F32), 16_777_216f32.to_le_bytes());
        let through_f32 = half::f16::from_f32(1.000_488_281_250_000_1f64 as f32).to_bits().to_le_bytes();
        assert_eq!(convert(Kind::F64, &1.000_488_281_250_000_1f64.to_le_bytes(), Kind::F16), through_f32);
    }
}
