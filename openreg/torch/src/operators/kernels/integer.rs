//! Elementwise operators on integer tensors, in exact 64-bit arithmetic that wraps as CPU's
//! does: the float32 kernels of elementwise.rs would round integers above 2^24. Operands are
//! integers of any width, or bool (a `where` condition, a mask, a comparison's result); each
//! run along the fastest dimension is read into i64 blocks, computed, and written back.

use super::elementwise::{BLOCK, parallel};
use super::walk::{Layout, Offsets};
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::{Pointwise, Reduction};

/// [`launch_pointwise`] for integer operands (kernels/integer.rs), in exact arithmetic. False,
/// having done nothing, if a scalar it reads is not an integer that float64 holds exactly
/// (CPU's kernel takes those).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_integer(
    op: Pointwise, scalars: [f64; 2], data: &[usize], storages: &[usize], dtypes: &[i8], constants: &[f64],
    shape: &[i64], strides: &[i64], device: i64,
) -> Result<bool> {
    const EXACT: f64 = (1u64 << 53) as f64;
    let exact = |v: f64| v.fract() == 0.0 && v.abs() < EXACT;
    let constant = |k: usize| constants.get(k).copied().unwrap_or(0.0);
    // clamp's absent bounds arrive infinite: the integers' ends.
    let integral = |v: f64| match v {
        v if op == Pointwise::Clamp && v == f64::NEG_INFINITY => Some(i64::MIN),
        v if op == Pointwise::Clamp && v == f64::INFINITY => Some(i64::MAX),
        v => exact(v).then_some(v as i64),
    };
    let mut ints = [0i64; 2];
    for k in 0..scalars_read(op) {
        match integral(scalars[k]) {
            Some(v) => ints[k] = v,
            None => return Ok(false),
        }
    }
    if (1..data.len()).any(|k| data[k] == 0 && !exact(constant(k))) {
        return Ok(false);
    }
    let layout = Layout::new(shape, strides, data.len());
    let n = layout.numel();
    if n == 0 {
        return Ok(true);
    }
    let ty = |k: usize| Int::from_code(dtypes[k]).unwrap_or(Int::I64); // applies checked them
    let storage = |k: usize| storages.get(2 * k..2 * k + 2).unwrap_or(&[]);
    let out = (view(data[0], layout.extent(0, ty(0).size()), storage(0))?, ty(0));
    let mut inputs = smallvec::SmallVec::new();
    for k in 1..data.len() {
        inputs.push(match data[k] {
            0 => Source::Constant(ty(k).wrap(constant(k) as i64)),
            ptr => Source::Memory { base: view(ptr, layout.extent(k, ty(k).size()), storage(k))?, ty: ty(k) },
        });
    }
    let work = Integer { op, scalars: ints, out, inputs, layout };
    launch(device, n, move || work.run())?;
    Ok(true)
}

/// An integer element type (bool included), by its `c10::ScalarType` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Int {
    U8,
    I8,
    I16,
    I32,
    I64,
    Bool,
}

impl Int {
    pub(crate) fn from_code(code: i8) -> Option<Int> {
        Some(match code {
            0 => Int::U8,
            1 => Int::I8,
            2 => Int::I16,
            3 => Int::I32,
            4 => Int::I64,
            11 => Int::Bool,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Int::U8 | Int::I8 | Int::Bool => 1,
            Int::I16 => 2,
            Int::I32 => 4,
            Int::I64 => 8,
        }
    }

    /// `v` converted to this type and back, as C++ converts a CPU scalar to the operation's
    /// type (`x <= -3` on uint8 compares with 253).
    pub(crate) fn wrap(self, v: i64) -> i64 {
        match self {
            Int::U8 => i64::from(v as u8),
            Int::I8 => i64::from(v as i8),
            Int::I16 => i64::from(v as i16),
            Int::I32 => i64::from(v as i32),
            Int::I64 => v,
            Int::Bool => i64::from(v != 0),
        }
    }

    /// The smallest and largest values of the type.
    fn bounds(self) -> (i64, i64) {
        match self {
            Int::U8 => (0, 255),
            Int::Bool => (0, 1),
            Int::I8 => (i8::MIN.into(), i8::MAX.into()),
            Int::I16 => (i16::MIN.into(), i16::MAX.into()),
            Int::I32 => (i32::MIN.into(), i32::MAX.into()),
            Int::I64 => (i64::MIN, i64::MAX),
        }
    }

    /// One element at `p`.
    ///
    /// # Safety
    /// `p` points to an element of this type the caller may read.
    #[inline(always)]
    pub(crate) unsafe fn read(self, p: *const u8) -> i64 {
        unsafe {
            match self {
                Int::U8 => i64::from(p.read()),
                Int::Bool => i64::from(p.read() != 0),
                Int::I8 => i64::from(p.cast::<i8>().read()),
                Int::I16 => i64::from(p.cast::<i16>().read_unaligned()),
                Int::I32 => i64::from(p.cast::<i32>().read_unaligned()),
                Int::I64 => p.cast::<i64>().read_unaligned(),
            }
        }
    }

    /// Writes `v` at `p`, truncated to the width as C++'s conversions do (bool: nonzero is true).
    ///
    /// # Safety
    /// `p` points to an element of this type the caller may write.
    #[inline(always)]
    pub(crate) unsafe fn write(self, p: *mut u8, v: i64) {
        unsafe {
            match self {
                Int::U8 | Int::I8 => p.write(v as u8),
                Int::Bool => p.write(u8::from(v != 0)),
                Int::I16 => p.cast::<i16>().write_unaligned(v as i16),
                Int::I32 => p.cast::<i32>().write_unaligned(v as i32),
                Int::I64 => p.cast::<i64>().write_unaligned(v),
            }
        }
    }

    /// Reads `out.len()` elements `stride` bytes apart.
    ///
    /// # Safety
    /// Every element read lies in memory the caller may read.
    unsafe fn load(self, src: *const u8, stride: isize, out: &mut [i64]) {
        for (i, v) in out.iter_mut().enumerate() {
            *v = unsafe { self.read(src.wrapping_offset(i as isize * stride)) };
        }
    }

    /// Writes values `stride` bytes apart.
    ///
    /// # Safety
    /// Every element written lies in memory the caller may write.
    unsafe fn store(self, dst: *mut u8, stride: isize, values: &[i64]) {
        for (i, &v) in values.iter().enumerate() {
            unsafe { self.write(dst.wrapping_offset(i as isize * stride), v) };
        }
    }

    /// [`Int::load`] of contiguous elements.
    ///
    /// # Safety
    /// As for [`Int::load`].
    pub(crate) unsafe fn load_row(self, src: *const u8, out: &mut [i64]) {
        unsafe { self.load(src, self.size() as isize, out) }
    }

    /// [`Int::store`] of contiguous elements.
    ///
    /// # Safety
    /// As for [`Int::store`].
    pub(crate) unsafe fn store_row(self, dst: *mut u8, values: &[i64]) {
        unsafe { self.store(dst, self.size() as isize, values) }
    }
}

/// True if the operation has an integer formula below.
fn computes(op: Pointwise) -> bool {
    matches!(
        op,
        Pointwise::Fill
            | Pointwise::Copy
            | Pointwise::Floor
            | Pointwise::Ceil
            | Pointwise::Trunc
            | Pointwise::Neg
            | Pointwise::Abs
            | Pointwise::Sign
            | Pointwise::Add
            | Pointwise::Mul
            | Pointwise::Maximum
            | Pointwise::Minimum
            | Pointwise::ClampMin
            | Pointwise::ClampMax
            | Pointwise::Clamp
            | Pointwise::Eq
            | Pointwise::Ne
            | Pointwise::Lt
            | Pointwise::Le
            | Pointwise::Gt
            | Pointwise::Ge
            | Pointwise::LogicalNot
            | Pointwise::LogicalAnd
            | Pointwise::LogicalOr
            | Pointwise::Where
            | Pointwise::MaskedFill
            | Pointwise::BitwiseAnd
            | Pointwise::BitwiseOr
            | Pointwise::BitwiseXor
            | Pointwise::BitwiseNot
            | Pointwise::DivFloor
            | Pointwise::DivTrunc
    )
}

/// True if these operands (output first) are integer work for this module: every one an
/// integer or bool, at least one not bool (all-bool logic is the float kernels' 0.0/1.0).
pub(crate) fn applies(op: Pointwise, dtypes: &[i8]) -> bool {
    let types: Option<Vec<Int>> = dtypes.iter().map(|&d| Int::from_code(d)).collect();
    computes(op) && types.is_some_and(|t| t.iter().any(|&t| t != Int::Bool))
}

/// The operation's scalars it reads (alpha, the fill value, a clamp bound).
pub(crate) fn scalars_read(op: Pointwise) -> usize {
    match op {
        Pointwise::Fill | Pointwise::Add | Pointwise::MaskedFill | Pointwise::ClampMin | Pointwise::ClampMax => 1,
        Pointwise::Clamp => 2,
        _ => 0,
    }
}

/// Where an input's elements come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// Runtime-view memory of this type.
    Memory { base: usize, ty: Int },
    /// One value for every element: a CPU scalar.
    Constant(i64),
}

/// One integer elementwise operation, ready to run on a stream's worker.
#[derive(Clone)]
pub(crate) struct Integer {
    pub op: Pointwise,
    pub scalars: [i64; 2],
    pub out: (usize, Int),
    pub inputs: smallvec::SmallVec<[Source; 3]>,
    pub layout: Layout,
}

impl Integer {
    pub(crate) fn run(&self) {
        let l = &self.layout;
        parallel(l.numel(), |start, count| {
            let mut ins = [[0i64; BLOCK]; 3];
            let mut out = [0i64; BLOCK];
            l.walk(start, count, |offsets, len| {
                let mut done = 0;
                while done < len {
                    let n = (len - done).min(BLOCK);
                    let at = |k: usize| offsets[k] + done as isize * l.strides[0][k];
                    for (k, source) in self.inputs.iter().enumerate() {
                        match *source {
                            Source::Constant(v) => ins[k][..n].fill(v),
                            // SAFETY: the launch checked every operand's extent in its storage.
                            Source::Memory { base, ty } => unsafe {
                                ty.load((base as isize + at(k + 1)) as *const u8, l.strides[0][k + 1], &mut ins[k][..n])
                            },
                        }
                    }
                    compute(self.op, self.scalars, [&ins[0][..n], &ins[1][..n], &ins[2][..n]], &mut out[..n]);
                    let (base, ty) = self.out;
                    // SAFETY: as above; an in-place output was read in full before this write.
                    unsafe { ty.store((base as isize + at(0)) as *mut u8, l.strides[0][0], &out[..n]) };
                    done += n;
                }
            });
        });
    }
}

// ANCHOR: formulas
/// The integer formulas; `x` is alpha, the fill value or the (lower) bound, `y` the upper one. Wrapping, as C++'s
/// integer arithmetic is on CPU; comparisons and logic give 0 or 1.
fn compute(op: Pointwise, [x, y]: [i64; 2], [a, b, c]: [&[i64]; 3], o: &mut [i64]) {
    let map1 = |o: &mut [i64], f: fn(i64, i64) -> i64| o.iter_mut().zip(a).for_each(|(o, &a)| *o = f(a, x));
    let map2 = |o: &mut [i64], f: fn(i64, i64, i64) -> i64| {
        o.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (&a, &b))| *o = f(a, b, x))
    };
    match op {
        Pointwise::Fill => o.fill(x),
        // Integers are whole already: rounding is a copy, as on CPU.
        Pointwise::Copy | Pointwise::Floor | Pointwise::Ceil | Pointwise::Trunc => o.copy_from_slice(a),
        Pointwise::Neg => map1(o, |a, _| a.wrapping_neg()),
        Pointwise::Abs => map1(o, |a, _| a.wrapping_abs()),
        Pointwise::Sign => map1(o, |a, _| a.signum()),
        Pointwise::ClampMin => map1(o, |a, x| a.max(x)),
        Pointwise::ClampMax => map1(o, |a, x| a.min(x)),
        Pointwise::Clamp => o.iter_mut().zip(a).for_each(|(o, &a)| *o = a.max(x).min(y)),
        Pointwise::LogicalNot => map1(o, |a, _| i64::from(a == 0)),
        Pointwise::BitwiseNot => map1(o, |a, _| !a),
        Pointwise::Add => map2(o, |a, b, x| a.wrapping_add(x.wrapping_mul(b))),
        Pointwise::Mul => map2(o, |a, b, _| a.wrapping_mul(b)),
        Pointwise::Maximum => map2(o, |a, b, _| a.max(b)),
        Pointwise::Minimum => map2(o, |a, b, _| a.min(b)),
        Pointwise::Eq => map2(o, |a, b, _| i64::from(a == b)),
        Pointwise::Ne => map2(o, |a, b, _| i64::from(a != b)),
        Pointwise::Lt => map2(o, |a, b, _| i64::from(a < b)),
        Pointwise::Le => map2(o, |a, b, _| i64::from(a <= b)),
        Pointwise::Gt => map2(o, |a, b, _| i64::from(a > b)),
        Pointwise::Ge => map2(o, |a, b, _| i64::from(a >= b)),
        Pointwise::LogicalAnd => map2(o, |a, b, _| i64::from(a != 0 && b != 0)),
        Pointwise::LogicalOr => map2(o, |a, b, _| i64::from(a != 0 || b != 0)),
        // Bitwise on the two's complement bits; bool operands hold 0 or 1, so `!` is `^ 1`.
        Pointwise::BitwiseAnd => map2(o, |a, b, _| a & b),
        Pointwise::BitwiseOr => map2(o, |a, b, _| a | b),
        Pointwise::BitwiseXor => map2(o, |a, b, _| a ^ b),
        // The glue sends no zero divisor (CPU raises ZeroDivisionError for one).
        Pointwise::DivTrunc => map2(o, |a, b, _| if b == 0 { 0 } else { a.wrapping_div(b) }),
        Pointwise::DivFloor => map2(o, |a, b, _| {
            if b == 0 {
                return 0;
            }
            let q = a.wrapping_div(b);
            if a.wrapping_rem(b) != 0 && (a < 0) != (b < 0) { q - 1 } else { q }
        }),
        // (mask, self): the value where the mask is set.
        Pointwise::MaskedFill => map2(o, |mask, s, x| if mask != 0 { x } else { s }),
        Pointwise::Where => {
            for (i, o) in o.iter_mut().enumerate() {
                *o = if a[i] != 0 { b[i] } else { c[i] };
            }
        }
        _ => {} // computes() admits only the operations above
    }
}
// ANCHOR_END: formulas

/// An integer reduction (sum, max or min; bool read as 0 or 1) over a reduction layout: the
/// output has stride 0 along the reduced dimensions. Serial, over the whole layout: integer
/// reductions here are masks and counters of a few elements.
#[derive(Clone)]
pub(crate) struct Reduce {
    pub op: Reduction,
    pub out: (usize, Int),
    pub input: (usize, Int),
    pub layout: Layout,
}

impl Reduce {
    pub(crate) fn run(&self) {
        let l = &self.layout;
        let ((out, to), (input, from)) = (self.out, self.input);
        let (identity, combine): (i64, fn(i64, i64) -> i64) = match self.op {
            Reduction::Amax => (to.bounds().0, i64::max),
            Reduction::Amin => (to.bounds().1, i64::min),
            _ => (0, i64::wrapping_add),
        };
        let at = |base: usize, offsets: &Offsets, k: usize, i: usize| (base as isize + offsets[k] + i as isize * l.strides[0][k]) as *mut u8;
        // SAFETY: the launch checked both operands' extents; the first pass sets every output
        // element, the second folds every input element into its output element.
        l.walk(0, l.numel(), |o, len| (0..len).for_each(|i| unsafe { to.write(at(out, o, 0, i), identity) }));
        l.walk(0, l.numel(), |o, len| {
            for i in 0..len {
                unsafe {
                    let p = at(out, o, 0, i);
                    to.write(p, combine(to.read(p), from.read(at(input, o, 1, i))));
                }
            }
        });
    }
}
