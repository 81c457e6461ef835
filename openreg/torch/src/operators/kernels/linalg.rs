//! QR decomposition by Householder reflections (`torch.linalg.qr`, which `nn.init.orthogonal_`
//! calls), in float64 whatever the dtype, one matrix per task part. The reflector of column j
//! is `v = x + sign(x0) |x| e1`, so `R[j][j] = -sign(x0) |x|`, and a column with nothing below
//! the diagonal is left alone: the signs LAPACK's `geqrf` (`dlarfg`) gives, and so CPU's.

use super::elementwise::parallel_min;
use super::{launch, view};
use crate::error::Result;
use crate::ffi::ffi::Dense;

/// QR of `batch` contiguous `m` x `n` matrices (float32 or float64, `dtype`) into `q` and `r`
/// (contiguous; `q.data` 0 for mode "r"). False if the dtype is not one the kernel takes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_qr(
    a: Dense, q: Dense, r: Dense, batch: i64, m: i64, n: i64, complete: bool, device: i64,
) -> Result<bool> {
    let f64s = match a.dtype {
        6 => false,
        7 => true,
        _ => return Ok(false),
    };
    let size = if f64s { 8 } else { 4 };
    let [batch, m, n] = [batch, m, n].map(|v| v.max(0) as usize);
    if batch * m * n == 0 {
        return Ok(true);
    }
    let a = view(a.data, a.numel * size, &[a.storage, a.storage_len])?;
    let q = if q.data == 0 { 0 } else { view(q.data, q.numel * size, &[q.storage, q.storage_len])? };
    let r = view(r.data, r.numel * size, &[r.storage, r.storage_len])?;
    let work = Qr { batch, m, n, complete, f64s, a, q, r };
    launch(device, batch * m * n * m.min(n), move || work.run())?;
    Ok(true)
}

/// `batch` row-major `m` x `n` matrices `a` (float32 or float64: `f64s`) into `q` (`m` x `k`,
/// or `m` x `m` when `complete`) and `r` (`k` x `n`, or `m` x `n`); `q` is 0 for mode "r".
#[derive(Clone)]
pub(crate) struct Qr {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub complete: bool,
    pub f64s: bool,
    pub a: usize,
    pub q: usize,
    pub r: usize,
}

impl Qr {
    pub(crate) fn run(&self) {
        parallel_min(self.batch, 1, |start, count| {
            for b in start..start + count {
                self.one(b);
            }
        });
    }

    fn read(&self, base: usize, index: usize) -> f64 {
        // SAFETY: the launch checked every matrix's extent.
        unsafe { if self.f64s { *(base as *const f64).add(index) } else { f64::from(*(base as *const f32).add(index)) } }
    }

    fn write(&self, base: usize, index: usize, v: f64) {
        // SAFETY: as above; matrices of different parts are disjoint.
        unsafe {
            if self.f64s { *(base as *mut f64).add(index) = v } else { *(base as *mut f32).add(index) = v as f32 }
        }
    }

    fn one(&self, b: usize) {
        let (m, n) = (self.m, self.n);
        let k = m.min(n);
        let mut r: Vec<f64> = (0..m * n).map(|i| self.read(self.a, b * m * n + i)).collect();
        let mut reflectors: Vec<Vec<f64>> = Vec::with_capacity(k);
        for j in 0..k {
            let tail = (j + 1..m).map(|i| r[i * n + j] * r[i * n + j]).sum::<f64>();
            let norm = (r[j * n + j] * r[j * n + j] + tail).sqrt();
            let mut v: Vec<f64> = (j..m).map(|i| r[i * n + j]).collect();
            if tail == 0.0 {
                // Nothing below the diagonal: H = I, as LAPACK's dlarfg (the diagonal keeps its sign).
                reflectors.push(Vec::new());
                continue;
            }
            let sign = if v[0] < 0.0 { -1.0 } else { 1.0 };
            v[0] += sign * norm;
            let vv = v.iter().map(|x| x * x).sum::<f64>();
            // R <- (I - 2 v v^T / v^T v) R on rows j.., columns j..
            for c in j..n {
                let dot = (j..m).map(|i| v[i - j] * r[i * n + c]).sum::<f64>();
                let f = 2.0 * dot / vv;
                for i in j..m {
                    r[i * n + c] -= f * v[i - j];
                }
            }
            for i in j + 1..m {
                r[i * n + j] = 0.0;
            }
            reflectors.push(v);
        }
        let rows_r = if self.complete { m } else { k };
        for i in 0..rows_r {
            for c in 0..n {
                self.write(self.r, b * rows_r * n + i * n + c, if i < m { r[i * n + c] } else { 0.0 });
            }
        }
        if self.q == 0 {
            return;
        }
        // Q = H_0 H_1 ... H_{k-1} applied to the first `cols` columns of the identity.
        let cols = if self.complete { m } else { k };
        let mut q = vec![0.0; m * cols];
        for i in 0..cols {
            q[i * cols + i] = 1.0;
        }
        for (j, v) in reflectors.iter().enumerate().rev() {
            if v.is_empty() {
                continue;
            }
            let vv = v.iter().map(|x| x * x).sum::<f64>();
            for c in 0..cols {
                let dot = (j..m).map(|i| v[i - j] * q[i * cols + c]).sum::<f64>();
                let f = 2.0 * dot / vv;
                for i in j..m {
                    q[i * cols + c] -= f * v[i - j];
                }
            }
        }
        for (i, &v) in q.iter().enumerate() {
            self.write(self.q, b * m * cols + i, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_times_r_is_a_and_q_is_orthogonal() {
        for (m, n) in [(4, 3), (3, 5), (6, 6), (1, 1)] {
            let a: Vec<f64> = (0..m * n).map(|i| ((i * 7919) % 13) as f64 - 6.0 + 0.5 * (i as f64).sin()).collect();
            let k = m.min(n);
            let (mut q, mut r) = (vec![0.0; m * k], vec![0.0; k * n]);
            Qr { batch: 1, m, n, complete: false, f64s: true, a: a.as_ptr() as usize, q: q.as_mut_ptr() as usize, r: r.as_mut_ptr() as usize }.run();
            for i in 0..m {
                for c in 0..n {
                    let qr: f64 = (0..k).map(|t| q[i * k + t] * r[t * n + c]).sum();
                    assert!((qr - a[i * n + c]).abs() < 1e-9, "{m}x{n}");
                }
            }
            for c1 in 0..k {
                for c2 in 0..k {
                    let dot: f64 = (0..m).map(|i| q[i * k + c1] * q[i * k + c2]).sum();
                    assert!((dot - f64::from(u8::from(c1 == c2))).abs() < 1e-9);
                }
            }
        }
    }
}
