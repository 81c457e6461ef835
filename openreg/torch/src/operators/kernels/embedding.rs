//! Row gathers and scatters for embeddings: `index_select` (an embedding's forward reads the
//! weight's rows) and `embedding_dense_backward` (adds each output row's gradient into the
//! weight row it came from). The indices arrive as host values, checked by C++ like CPU checks
//! them (an `IndexError`); every index is checked again here, so a bad one cannot write
//! outside a tensor.

use super::dtype::{Dtype, load, store};

/// Copies, for each of `outer` blocks, rows `indices` (of `size`) of `inner` elements of
/// `item` bytes from `src` into consecutive rows of `dst`.
#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct IndexSelect {
    pub src: usize,
    pub dst: usize,
    pub indices: Vec<usize>,
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
    pub item: usize,
}

impl IndexSelect {
    pub(crate) fn run(&self) {
        let (row, n) = (self.inner * self.item, self.indices.len());
        for o in 0..self.outer {
            for (i, &index) in self.indices.iter().enumerate() {
                let from = (self.src + (o * self.size + index) * row) as *const u8;
                let to = (self.dst + (o * n + i) * row) as *mut u8;
                // SAFETY: index < size (checked at launch) and both extents were checked.
                unsafe { std::ptr::copy_nonoverlapping(from, to, row) };
            }
        }
    }
}

/// grad_weight[indices[i]] += grad_output[i] over rows of `dim` elements; an index equal to
/// `padding_idx` adds nothing; with `scale_by_freq`, each row's sum is divided by how often
/// its index occurs.
#[derive(Clone)]
pub(crate) struct EmbeddingBackward {
    pub grad_weight: (usize, Dtype),
    pub grad_output: (usize, Dtype),
    pub indices: Vec<usize>,
    pub num_weights: usize,
    pub dim: usize,
    pub padding_idx: Option<usize>,
    pub scale_by_freq: bool,
}

impl EmbeddingBackward {
    pub(crate) fn run(&self) {
        let d = self.dim;
        let mut sums = vec![0.0f32; self.num_weights * d];
        let mut counts = vec![0u32; self.num_weights];
        let mut row = vec![0.0f32; d];
        let (gptr, gtype) = self.grad_output;
        for (i, &index) in self.indices.iter().enumerate() {
            counts[index] += 1;
            if Some(index) == self.padding_idx {
                continue;
            }
            // SAFETY: row i of grad_output, checked at launch.
            unsafe { load(gtype, (gptr + i * d * gtype.size()) as *const u8, gtype.size() as isize, &mut row) };
            for (s, g) in sums[index * d..(index + 1) * d].iter_mut().zip(&row) {
                *s += g;
            }
        }
        if self.scale_by_freq {
            for (index, &count) in counts.iter().enumerate() {
                if count > 1 {
                    sums[index * d..(index + 1) * d].iter_mut().for_each(|s| *s /= count as f32);
                }
            }
        }
        let (wptr, wtype) = self.grad_weight;
        // SAFETY: num_weights x dim elements, checked at launch.
        unsafe { store(wtype, wptr as *mut u8, wtype.size() as isize, &sums) };
    }
}
