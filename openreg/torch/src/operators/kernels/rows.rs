//! Kernels along the last dimension of contiguous rows (C++ moves the dimension last and makes
//! the input contiguous): `argmax`/`argmin`, which pick an index, and `cumsum`, which scans.
//! Floating-point elements are read as float32 (CPU's float16 and bfloat16 kernels compute in
//! float32 too); integers and bool exactly, as i64.

use super::dtype::{self, Dtype};
use super::elementwise::parallel_min;
use super::integer::Int;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// The index of each row's largest (`max`) or smallest element (kernels/rows.rs).
pub(crate) fn launch_arg_extremum(max: bool, rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool> {
    let (Some(element), 4) = (Element::from_code(input.dtype), out.dtype) else { return Ok(false) };
    let [rows, len] = [rows, len].map(|v| v.max(0) as usize);
    if rows == 0 || len == 0 || input.numel != rows * len || out.numel != rows {
        return Ok(rows == 0);
    }
    let input_view = view(input.data, input.numel * element.size(), &[input.storage, input.storage_len])?;
    let out_view = view(out.data, rows * 8, &[out.storage, out.storage_len])?;
    // SAFETY: both views were checked for their elements.
    launch(device, input.numel, move || unsafe { arg_extremum(max, element, input_view, out_view, rows, len) })?;
    Ok(true)
}

/// The running sum along each row, in the input's dtype (kernels/rows.rs).
pub(crate) fn launch_cumsum(rows: i64, len: i64, input: Dense, out: Dense, device: i64) -> Result<bool> {
    let Some(element) = Element::from_code(input.dtype) else { return Ok(false) };
    let [rows, len] = [rows, len].map(|v| v.max(0) as usize);
    if input.dtype != out.dtype || input.numel != rows * len || out.numel != input.numel {
        return Ok(false);
    }
    if input.numel == 0 {
        return Ok(true);
    }
    let bytes = input.numel * element.size();
    let input_view = view(input.data, bytes, &[input.storage, input.storage_len])?;
    let out_view = view(out.data, bytes, &[out.storage, out.storage_len])?;
    // SAFETY: both views were checked for their elements.
    launch(device, input.numel, move || unsafe { cumsum(element, input_view, out_view, rows, len) })?;
    Ok(true)
}

/// An element type these kernels read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Element {
    Float(Dtype),
    Int(Int),
}

impl Element {
    pub(crate) fn from_code(code: i8) -> Option<Element> {
        Dtype::from_code(code).map(Element::Float).or_else(|| Int::from_code(code).map(Element::Int))
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Element::Float(d) => d.size(),
            Element::Int(i) => i.size(),
        }
    }
}

/// Rows at least this long get a thread each; shorter ones are grouped.
const ROW_WORK: usize = 1 << 14;

/// `out[r]`: the index of row r's largest (`max`) or smallest element, as CPU picks it: NaN
/// beats every number (the first NaN wins), and the first of equal elements wins.
///
/// # Safety
/// `input` holds `rows * len` contiguous elements, `out` `rows` int64s (runtime views).
pub(crate) unsafe fn arg_extremum(max: bool, element: Element, input: usize, out: usize, rows: usize, len: usize) {
    parallel_min(rows, (ROW_WORK / len.max(1)).max(1), |start, count| {
        let mut f = vec![0f32; len];
        let mut i = vec![0i64; len];
        for r in start..start + count {
            let row = input + r * len * element.size();
            let best = match element {
                Element::Float(d) => {
                    unsafe { dtype::load(d, row as *const u8, d.size() as isize, &mut f) };
                    let better = |a: f32, b: f32| a.is_nan() && !b.is_nan() || (!b.is_nan() && if max { a > b } else { a < b });
                    (1..len).fold(0, |k, j| if better(f[j], f[k]) { j } else { k })
                }
                Element::Int(t) => {
                    unsafe { t.load_row(row as *const u8, &mut i) };
                    (1..len).fold(0, |k, j| if if max { i[j] > i[k] } else { i[j] < i[k] } { j } else { k })
                }
            };
            unsafe { (out as *mut i64).add(r).write(best as i64) };
        }
    });
}

/// `out[r][j] = input[r][0] + … + input[r][j]`, of one dtype: floating point accumulated in
/// float64 (CPU's accumulate type) and rounded per element, integers in wrapping i64.
///
/// # Safety
/// `input` and `out` hold `rows * len` contiguous elements each (runtime views; they may be
/// the same memory).
pub(crate) unsafe fn cumsum(element: Element, input: usize, out: usize, rows: usize, len: usize) {
    parallel_min(rows, (ROW_WORK / len.max(1)).max(1), |start, count| {
        let mut f = vec![0f32; len];
        let mut i = vec![0i64; len];
        for r in start..start + count {
            let offset = r * len * element.size();
            let (src, dst) = ((input + offset) as *const u8, (out + offset) as *mut u8);
            match element {
                Element::Float(d) => unsafe {
                    dtype::load(d, src, d.size() as isize, &mut f);
                    // CPU's accumulate type: float64 for float32, float32 for 16-bit floats.
                    if d == Dtype::Float {
                        let mut acc = 0f64;
                        for v in f.iter_mut() {
                            acc += f64::from(*v);
                            *v = acc as f32;
                        }
                    } else {
                        let mut acc = 0f32;
                        for v in f.iter_mut() {
                            acc += *v;
                            *v = acc;
                        }
                    }
                    dtype::store(d, dst, d.size() as isize, &f);
                },
                Element::Int(t) => unsafe {
                    t.load_row(src, &mut i);
                    let mut acc = 0i64;
                    for v in i.iter_mut() {
                        acc = acc.wrapping_add(*v);
                        *v = acc;
                    }
                    t.store_row(dst, &i);
                },
            }
        }
    });
}
