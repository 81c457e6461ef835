//! Iterating a TensorIterator-shaped index space: `shape[0]` is the fastest dimension and each
//! operand has a byte stride per dimension (0 where it is broadcast).

/// Up to this many operands per kernel (an output and three inputs: addcmul's).
pub(crate) const MAX_OPERANDS: usize = 4;

pub(crate) type Offsets = [isize; MAX_OPERANDS];

/// Per-dimension lists, inline up to four dimensions (TensorIterator coalesces most
/// tensors to one or two): launching a small kernel allocates nothing.
pub(crate) type Dims<T> = smallvec::SmallVec<[T; 4]>;

// ANCHOR: layout
/// An index space and each operand's strides in it.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub shape: Dims<usize>,
    /// `strides[d][k]`: operand `k`'s byte stride along dimension `d`.
    pub strides: Dims<Offsets>,
}
// ANCHOR_END: layout

impl Layout {
    /// `shape` and the flattened `[operand][dim]` byte strides C++ passes (TensorIterator's).
    pub(crate) fn new(shape: &[i64], strides: &[i64], operands: usize) -> Layout {
        if shape.is_empty() {
            // A 0-dim tensor: one element.
            return Layout { shape: smallvec::smallvec![1], strides: smallvec::smallvec![[0; MAX_OPERANDS]] };
        }
        let ndim = shape.len();
        let mut layout = Layout { shape: Dims::with_capacity(ndim), strides: Dims::with_capacity(ndim) };
        for d in 0..ndim {
            layout.shape.push(shape[d].max(0) as usize);
            let mut per = [0isize; MAX_OPERANDS];
            for (k, s) in per.iter_mut().enumerate().take(operands) {
                *s = strides[k * ndim + d] as isize;
            }
            layout.strides.push(per);
        }
        layout
    }

    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes from the first to one past the last element of operand `k` (strides are >= 0).
    pub(crate) fn extent(&self, k: usize, item: usize) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        let last: isize = self.shape.iter().zip(&self.strides).map(|(&n, s)| (n as isize - 1) * s[k]).sum();
        last as usize + item
    }

    /// Calls `f(offsets, len)` for each run along dimension 0 covering the `count` elements
    /// from linear index `start`; `offsets` are each operand's byte offset of the run's start.
    pub(crate) fn walk(&self, start: usize, count: usize, mut f: impl FnMut(&Offsets, usize)) {
        if count == 0 {
            return;
        }
        let ndim = self.shape.len();
        if ndim == 0 {
            // No dimensions: a single element (a reduction over only size-1 dimensions).
            return f(&[0; MAX_OPERANDS], 1);
        }
        // The multi-index of `start`, and the offsets it gives.
        let (mut small, mut big) = ([0usize; 16], Vec::new());
        let index: &mut [usize] = if ndim <= small.len() {
            &mut small[..ndim]
        } else {
            big.resize(ndim, 0);
            &mut big
        };
        let mut offsets = [0isize; MAX_OPERANDS];
        let mut rest = start;
        for d in 0..ndim {
            index[d] = rest % self.shape[d];
            rest /= self.shape[d];
            for k in 0..MAX_OPERANDS {
                offsets[k] += index[d] as isize * self.strides[d][k];
            }
        }
        let mut left = count;
        while left > 0 {
            let len = (self.shape[0] - index[0]).min(left);
            f(&offsets, len);
            left -= len;
            // Advance the odometer by `len` along dimension 0, carrying into the others.
            index[0] += len;
            for k in 0..MAX_OPERANDS {
                offsets[k] += len as isize * self.strides[0][k];
            }
            let mut d = 0;
            while d + 1 < ndim && index[d] == self.shape[d] {
                for k in 0..MAX_OPERANDS {
                    offsets[k] -= self.shape[d] as isize * self.strides[d][k];
                    offsets[k] += self.strides[d + 1][k];
                }
                index[d] = 0;
                index[d + 1] += 1;
                d += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_runs_in_order_with_carries() {
        // A 3x2 (dim 0 fastest) space; operand 0 contiguous floats, operand 1 broadcast on dim 0.
        let layout = Layout::new(&[3, 2], &[4, 12, 0, 4], 2);
        let mut seen = vec![];
        layout.walk(1, 4, |o, len| seen.push((o[0], o[1], len)));
        assert_eq!(seen, vec![(4, 0, 2), (12, 4, 2)]);
        assert_eq!(layout.extent(0, 4), 24);
        assert_eq!(layout.extent(1, 4), 8);
    }

    #[test]
    fn a_space_without_dimensions_is_one_element() {
        let layout = Layout { shape: Dims::new(), strides: Dims::new() };
        let mut seen = vec![];
        layout.walk(0, 1, |o, len| seen.push((o[0], len)));
        assert_eq!(seen, vec![(0, 1)]);
    }
}
