//! Element types the kernels read and write. Arithmetic runs in float32 for all of them, as
//! PyTorch's CPU kernels do for float16 and bfloat16; a kernel converts on load and store.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::integer::Int;

/// `c10::ScalarType::Int`.
pub(crate) const INT32: i8 = 3;

/// `c10::ScalarType::Long`.
pub(crate) const INT64: i8 = 4;

/// The `c10::ScalarType` codes the kernels compute in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    Half,
    Float,
    BFloat16,
    /// One byte, 0 or 1: read as 0.0 or 1.0, written as `value != 0` (NaN is true, as in
    /// PyTorch's casts). Only elementwise kernels take it ([`Dtype::elementwise`]).
    Bool,
    /// An integer input of a floating-point operation (`x / n` with an int64 `n`), read as
    /// float32 with C++'s rounding; never an output ([`Dtype::elementwise_input`]).
    Integer(Int),
}

impl Dtype {
    /// The dtype for a `c10::ScalarType` code, if the kernels compute in it.
    pub(crate) fn from_code(code: i8) -> Option<Dtype> {
        match code {
            5 => Some(Dtype::Half),
            6 => Some(Dtype::Float),
            15 => Some(Dtype::BFloat16),
            _ => None,
        }
    }

    /// [`Dtype::from_code`], and bool: the dtypes elementwise kernels read and write.
    pub(crate) fn elementwise(code: i8) -> Option<Dtype> {
        if code == 11 { Some(Dtype::Bool) } else { Dtype::from_code(code) }
    }

    /// [`Dtype::elementwise`], and integers: the dtypes elementwise kernels read.
    pub(crate) fn elementwise_input(code: i8) -> Option<Dtype> {
        Dtype::elementwise(code).or_else(|| Int::from_code(code).map(Dtype::Integer))
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Dtype::Float => 4,
            Dtype::Half | Dtype::BFloat16 => 2,
            Dtype::Bool => 1,
            Dtype::Integer(t) => t.size(),
        }
    }
}

/// Bytes per element of a `c10::ScalarType` code, for dtypes copied without conversion.
pub(crate) fn item_size(code: i8) -> Option<usize> {
    match code {
        0 | 1 | 11 => Some(1),  // uint8, int8, bool
        2 | 5 | 15 => Some(2),  // int16, float16, bfloat16
        3 | 6 => Some(4),       // int32, float32
        4 | 7 | 9 => Some(8),   // int64, float64, complex64
        10 => Some(16),         // complex128
        27 => Some(2),          // uint16
        28 => Some(4),          // uint32
        29 => Some(8),          // uint64
        _ => None,
    }
}

/// Reads `out.len()` elements `stride` bytes apart from `src` into float32.
///
/// # Safety
/// Every element read must lie in memory the caller may read.
pub(crate) unsafe fn load(dtype: Dtype, src: *const u8, stride: isize, out: &mut [f32]) {
    unsafe {
        match dtype {
            Dtype::Float if stride == 4 => {
                out.copy_from_slice(std::slice::from_raw_parts(src.cast::<f32>(), out.len()))
            }
            Dtype::Half if stride == 2 => {
                std::slice::from_raw_parts(src.cast::<f16>(), out.len()).convert_to_f32_slice(out)
            }
            Dtype::BFloat16 if stride == 2 => {
                std::slice::from_raw_parts(src.cast::<bf16>(), out.len()).convert_to_f32_slice(out)
            }
            Dtype::Float => gather(src, stride, out, |p| p.cast::<f32>().read_unaligned()),
            Dtype::Half => gather(src, stride, out, |p| p.cast::<f16>().read_unaligned().to_f32()),
            Dtype::BFloat16 => gather(src, stride, out, |p| p.cast::<bf16>().read_unaligned().to_f32()),
            Dtype::Bool => gather(src, stride, out, |p| f32::from(u8::from(p.read() != 0))),
            Dtype::Integer(t) => gather(src, stride, out, |p| t.read(p) as f32),
        }
    }
}

/// Writes float32 values as `dtype` elements `stride` bytes apart (rounding to nearest even).
///
/// # Safety
/// Every element written must lie in memory the caller may write.
pub(crate) unsafe fn store(dtype: Dtype, dst: *mut u8, stride: isize, values: &[f32]) {
    unsafe {
        match dtype {
            Dtype::Float if stride == 4 => {
                std::slice::from_raw_parts_mut(dst.cast::<f32>(), values.len()).copy_from_slice(values)
            }
            Dtype::Half if stride == 2 => std::slice::from_raw_parts_mut(dst.cast::<f16>(), values.len())
                .convert_from_f32_slice(values),
            Dtype::BFloat16 if stride == 2 => std::slice::from_raw_parts_mut(dst.cast::<bf16>(), values.len())
                .convert_from_f32_slice(values),
            Dtype::Float => scatter(dst, stride, values, |p, v| p.cast::<f32>().write_unaligned(v)),
            Dtype::Half => scatter(dst, stride, values, |p, v| p.cast::<f16>().write_unaligned(f16::from_f32(v))),
            Dtype::BFloat16 => {
                scatter(dst, stride, values, |p, v| p.cast::<bf16>().write_unaligned(bf16::from_f32(v)))
            }
            Dtype::Bool => scatter(dst, stride, values, |p, v| p.write(u8::from(v != 0.0))),
            // Not an output dtype of any launch; written as Rust converts (saturating).
            Dtype::Integer(t) => scatter(dst, stride, values, |p, v| t.write(p, v as i64)),
        }
    }
}

/// `len` elements of `slot` from element `first`, as float32: in place for float32, else
/// converted into `scratch`.
///
/// # Safety
/// The range lies in the operand, which the launch checked.
#[inline(always)] // per row in the normalization kernels: a call cost as much as a row of 64
pub(crate) unsafe fn read(slot: (usize, Dtype), first: usize, len: usize, scratch: &mut Vec<f32>) -> &[f32] {
    let (ptr, dt) = slot;
    if dt == Dtype::Float {
        return unsafe { std::slice::from_raw_parts((ptr as *const f32).add(first), len) };
    }
    scratch.resize(len, 0.0);
    unsafe { load(dt, (ptr + first * dt.size()) as *const u8, dt.size() as isize, scratch) };
    scratch
}

/// Runs `f` over `len` float32 elements that end up in `slot` from element `first`: the
/// operand itself for float32, else `scratch`, stored after.
///
/// # Safety
/// As for [`read`]; no one else writes the range meanwhile.
#[inline(always)]
pub(crate) unsafe fn write(slot: (usize, Dtype), first: usize, len: usize, scratch: &mut Vec<f32>, f: impl FnOnce(&mut [f32])) {
    let (ptr, dt) = slot;
    // One call of `f`, so that it is inlined here, and compiled with the caller's features (a
    // closure is compiled with those of the function that defines it).
    let float = dt == Dtype::Float;
    let target = if float {
        unsafe { std::slice::from_raw_parts_mut((ptr as *mut f32).add(first), len) }
    } else {
        scratch.resize(len, 0.0);
        &mut scratch[..]
    };
    f(target);
    if !float {
        unsafe { store(dt, (ptr + first * dt.size()) as *mut u8, dt.size() as isize, scratch) };
    }
}

#[inline(always)]
unsafe fn gather(src: *const u8, stride: isize, out: &mut [f32], read: impl Fn(*const u8) -> f32) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = read(unsafe { src.offset(i as isize * stride) });
    }
}

#[inline(always)]
unsafe fn scatter(dst: *mut u8, stride: isize, values: &[f32], write: impl Fn(*mut u8, f32)) {
    for (i, &v) in values.iter().enumerate() {
        write(unsafe { dst.offset(i as isize * stride) }, v);
    }
}
