//! Element types and reduction operators: what a collective does to the bytes it receives.

use half::{bf16, f16};

// ANCHOR: types
/// The element types a collective can reduce (PyTorch's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Float32,
    Float64,
    Float16,
    BFloat16,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt8,
    Bool,
}

/// The reductions of `torch.distributed.ReduceOp` this library implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Avg,
    Product,
    Min,
    Max,
}
// ANCHOR_END: types

impl DataType {
    /// The type named as PyTorch prints it (`torch.float32` -> "float32").
    pub fn parse(name: &str) -> Option<DataType> {
        Some(match name {
            "float32" => DataType::Float32,
            "float64" => DataType::Float64,
            "float16" => DataType::Float16,
            "bfloat16" => DataType::BFloat16,
            "int64" => DataType::Int64,
            "int32" => DataType::Int32,
            "int16" => DataType::Int16,
            "int8" => DataType::Int8,
            "uint8" => DataType::UInt8,
            "bool" => DataType::Bool,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            DataType::Float64 | DataType::Int64 => 8,
            DataType::Float32 | DataType::Int32 => 4,
            DataType::Float16 | DataType::BFloat16 | DataType::Int16 => 2,
            DataType::Int8 | DataType::UInt8 | DataType::Bool => 1,
        }
    }

    /// A number for the wire header, so that a receiver can tell its peer used another type.
    pub(crate) fn code(self) -> u16 {
        self as u16 + 1
    }

    pub(crate) fn name_of(code: u16) -> &'static str {
        const NAMES: [&str; 10] =
            ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"];
        NAMES.get((code as usize).wrapping_sub(1)).copied().unwrap_or("bytes")
    }
}

impl ReduceOp {
    /// `torch.distributed.ReduceOp`'s member name (`"SUM"`, ...).
    pub fn parse(name: &str) -> Option<ReduceOp> {
        Some(match name {
            "SUM" => ReduceOp::Sum,
            "AVG" => ReduceOp::Avg,
            "PRODUCT" => ReduceOp::Product,
            "MIN" => ReduceOp::Min,
            "MAX" => ReduceOp::Max,
            _ => return None,
        })
    }

    /// Whether `dtype` supports the operation (an average of booleans has no meaning).
    pub fn supports(self, dtype: DataType) -> bool {
        !(self == ReduceOp::Avg && dtype == DataType::Bool)
    }
}

/// What a reduction needs of an element type.
trait Element: Copy + PartialOrd {
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn add(self, other: Self) -> Self { self + other }
            fn mul(self, other: Self) -> Self { self * other }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
    )*};
}
float_element!(f32, f64, f16, bf16);

// Integers wrap on overflow, as PyTorch's integer arithmetic does.
macro_rules! int_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            fn add(self, other: Self) -> Self { self.wrapping_add(other) }
            fn mul(self, other: Self) -> Self { self.wrapping_mul(other) }
            fn is_nan(self) -> bool { false }
        }
    )*};
}
int_element!(i64, i32, i16, i8, u8);

/// One element of the reduction. NaN wins in min and max, as in `torch.minimum`.
#[inline(always)]
fn combine<T: Element>(op: ReduceOp, a: T, b: T) -> T {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a.add(b),
        ReduceOp::Product => a.mul(b),
        ReduceOp::Min if b < a || b.is_nan() => b,
        ReduceOp::Max if b > a || b.is_nan() => b,
        ReduceOp::Min | ReduceOp::Max => a,
    }
}

/// Views `bytes` as elements of `T`. The buffers come from device allocations, whole
/// elements apart, and scratch buffers made of `u64`s, so they are aligned.
fn elements<T>(bytes: &[u8]) -> &[T] {
    debug_assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) }
}

fn elements_mut<T>(bytes: &mut [u8]) -> &mut [T] {
    debug_assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) }
}

fn zip_with<T: Element>(op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    let pairs = elements_mut::<T>(acc).iter_mut().zip(elements::<T>(other));
    // One loop per operator, so that each inner loop is branch-free and vectorises.
    match op {
        ReduceOp::Sum | ReduceOp::Avg => pairs.for_each(|(a, &b)| *a = combine(ReduceOp::Sum, *a, b)),
        ReduceOp::Product => pairs.for_each(|(a, &b)| *a = combine(ReduceOp::Product, *a, b)),
        ReduceOp::Min => pairs.for_each(|(a, &b)| *a = combine(ReduceOp::Min, *a, b)),
        ReduceOp::Max => pairs.for_each(|(a, &b)| *a = combine(ReduceOp::Max, *a, b)),
    }
}

// ANCHOR: reduce_into
/// `acc[i] = acc[i] <op> other[i]` over two equally long byte buffers of `dtype` elements.
/// (For `Avg` this sums; [`divide`] finishes the average once every rank was added.)
pub fn reduce_into(dtype: DataType, op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    // The 16-bit floats compute through f32 one element at a time, rounding once per step.
    match dtype {
        DataType::Float32 => zip_with::<f32>(op, acc, other),
        DataType::Float64 => zip_with::<f64>(op, acc, other),
        DataType::Float16 => zip_with::<f16>(op, acc, other),
        DataType::BFloat16 => zip_with::<bf16>(op, acc, other),
        DataType::Int64 => zip_with::<i64>(op, acc, other),
        DataType::Int32 => zip_with::<i32>(op, acc, other),
        DataType::Int16 => zip_with::<i16>(op, acc, other),
        DataType::Int8 => zip_with::<i8>(op, acc, other),
        DataType::UInt8 => zip_with::<u8>(op, acc, other),
        // Booleans as 0/1 bytes: sum and max are "or", product and min are "and".
        DataType::Bool => {
            let or = matches!(op, ReduceOp::Sum | ReduceOp::Avg | ReduceOp::Max);
            for (a, &b) in acc.iter_mut().zip(other) {
                *a = if or { *a | b } else { *a & b };
            }
        }
    }
}
// ANCHOR_END: reduce_into

/// Divides every element by `n` (the last step of `Avg`); integers truncate toward zero.
pub fn divide(dtype: DataType, data: &mut [u8], n: usize) {
    macro_rules! each {
        ($t:ty, $f:expr) => {
            elements_mut::<$t>(data).iter_mut().for_each($f)
        };
    }
    match dtype {
        DataType::Float32 => each!(f32, |a| *a /= n as f32),
        DataType::Float64 => each!(f64, |a| *a /= n as f64),
        DataType::Float16 => each!(f16, |a| *a = f16::from_f32(a.to_f32() / n as f32)),
        DataType::BFloat16 => each!(bf16, |a| *a = bf16::from_f32(a.to_f32() / n as f32)),
        DataType::Int64 => each!(i64, |a| *a /= n as i64),
        DataType::Int32 => each!(i32, |a| *a /= n as i32),
        DataType::Int16 => each!(i16, |a| *a /= n as i16),
        DataType::Int8 => each!(i8, |a| *a = (*a as i64 / n as i64) as i8),
        DataType::UInt8 => each!(u8, |a| *a = (*a as u64 / n as u64) as u8),
        DataType::Bool => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; std::mem::size_of_val(v)];
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().cast(), out.as_mut_ptr(), out.len()) };
        out
    }

    #[test]
    fn every_op_on_floats_and_ints() {
        let (a, b) = ([1.0f32, -2.0, f32::NAN, 4.0], [3.0f32, 5.0, 1.0, f32::NAN]);
        for (op, expect) in [
            (ReduceOp::Sum, [4.0f32, 3.0, f32::NAN, f32::NAN]),
            (ReduceOp::Product, [3.0, -10.0, f32::NAN, f32::NAN]),
            (ReduceOp::Min, [1.0, -2.0, f32::NAN, f32::NAN]),
            (ReduceOp::Max, [3.0, 5.0, f32::NAN, f32::NAN]),
        ] {
            let mut acc = bytes(&a);
            reduce_into(DataType::Float32, op, &mut acc, &bytes(&b));
            let got = elements::<f32>(&acc);
            for (g, e) in got.iter().zip(expect) {
                assert!(g == &e || (g.is_nan() && e.is_nan()), "{op:?}: {got:?}");
            }
        }
        let mut acc = bytes(&[i64::MAX, 7]);
        reduce_into(DataType::Int64, ReduceOp::Sum, &mut acc, &bytes(&[1i64, -3]));
        divide(DataType::Int64, &mut acc, 2);
        assert_eq!(elements::<i64>(&acc), &[i64::MIN / 2, 2]);
    }
}
