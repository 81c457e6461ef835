//! torchvision's non-maximum suppression: of boxes taken in descending score order, keep each
//! box that no kept box overlaps by more than the threshold (intersection over union). The
//! kernel writes the kept indices and their count on the stream; the host reads the count (the
//! result's length is data, as for `nonzero`).

use openreg_runtime as rt;

use super::dtype::{Dtype, INT64};
use super::{launch, view};
use crate::error::{Failure, Result};
use crate::ffi::ffi::Dense;

/// `boxes`: contiguous float32 `[n, 4]` as `(x1, y1, x2, y2)`; `order`: the boxes' indices by
/// descending score (int64 `[n]`); out: `keep` (int64 `[n]`, the first `count` written) and
/// `count` (int64 `[1]`). False for dtypes that are not ours.
pub(crate) fn launch_nms(boxes: Dense, order: Dense, keep: Dense, count: Dense, iou_threshold: f64, device: i64) -> Result<bool> {
    if Dtype::from_code(boxes.dtype) != Some(Dtype::Float) {
        return Ok(false);
    }
    let n = order.numel;
    let int64 = [order, keep, count].iter().all(|t| t.dtype == INT64);
    if !int64 || boxes.numel != n * 4 || keep.numel != n || count.numel != 1 {
        let what = format!("nms: {} box coordinates, {n} indices, {} kept and {} count elements", boxes.numel, keep.numel, count.numel);
        return Err(Failure::from(rt::Error::InvalidValue(what)));
    }
    let slot = |t: &Dense, size: usize| view(t.data, t.numel * size, &[t.storage, t.storage_len]);
    let work = Suppression {
        n,
        boxes: slot(&boxes, 4)?,
        order: slot(&order, 8)?,
        keep: slot(&keep, 8)?,
        count: slot(&count, 8)?,
        iou_threshold,
    };
    launch(device, n * n, move || work.run())?;
    Ok(true)
}

/// One launched suppression: the runtime's views of its operands.
#[derive(Clone)] // a graph replays a captured kernel: it runs once per replay
pub(crate) struct Suppression {
    n: usize,
    boxes: usize,
    order: usize,
    keep: usize,
    count: usize,
    iou_threshold: f64,
}

impl Suppression {
    pub(crate) fn run(&self) {
        // SAFETY: the launch checked each operand's size.
        let (boxes, order, keep) = unsafe {
            (
                std::slice::from_raw_parts(self.boxes as *const [f32; 4], self.n),
                std::slice::from_raw_parts(self.order as *const i64, self.n),
                std::slice::from_raw_parts_mut(self.keep as *mut i64, self.n),
            )
        };
        let kept = suppress(boxes, order, self.iou_threshold, keep);
        unsafe { *(self.count as *mut i64) = kept as i64 };
    }
}

/// The suppression itself, in torchvision's order and arithmetic; returns how many indices it
/// wrote into `keep`. An index in `order` outside the boxes is skipped (the order comes from a
/// sort of the scores, so it cannot be one).
pub(crate) fn suppress(boxes: &[[f32; 4]], order: &[i64], iou_threshold: f64, keep: &mut [i64]) -> usize {
    let area = |b: &[f32; 4]| (b[2] - b[0]) * (b[3] - b[1]);
    let mut suppressed = vec![false; boxes.len()];
    let mut kept = 0;
    let valid: Vec<usize> = order.iter().filter_map(|&i| usize::try_from(i).ok().filter(|&i| i < boxes.len())).collect();
    for (k, &i) in valid.iter().enumerate() {
        if suppressed[i] {
            continue;
        }
        keep[kept] = i as i64;
        kept += 1;
        let (a, area_a) = (&boxes[i], area(&boxes[i]));
        for &j in &valid[k + 1..] {
            if suppressed[j] {
                continue;
            }
            let b = &boxes[j];
            let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
            let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
            let inter = w * h;
            let iou = inter / (area_a + area(b) - inter);
            if f64::from(iou) > iou_threshold {
                suppressed[j] = true;
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlapping_lower_score_box_is_suppressed() {
        let boxes = [[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [20.0, 20.0, 30.0, 30.0]];
        let mut keep = [0; 3];
        // Box 1 scores highest; box 0 overlaps it by 81 / 119 > 0.5.
        assert_eq!(suppress(&boxes, &[1, 0, 2], 0.5, &mut keep), 2);
        assert_eq!(keep[..2], [1, 2]);
        assert_eq!(suppress(&boxes, &[1, 0, 2], 0.7, &mut keep), 3);
    }
}
