//! The `_foreach_*` operators: one elementwise operation over lists of tensors in a single
//! launch (CUDA's multi_tensor_apply), which is how optimizers update every parameter at once.
//! Each tensor is contiguous float32; an input may instead be a per-tensor constant (the
//! scalar of `_foreach_mul_(list, 0.9)`).

use super::elementwise::{self, BLOCK, compute};
use crate::ffi::ffi::Pointwise;

/// One input of one tensor's operation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Operand {
    /// A runtime address of `n` float32 elements.
    Memory(usize),
    Constant(f32),
}

/// One tensor of the list: its output, inputs and scalars.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub out: usize,
    pub inputs: smallvec::SmallVec<[Operand; 3]>,
    pub scalars: [f32; 2],
    pub n: usize,
}

#[derive(Clone)] // a graph replays a captured kernel
pub(crate) struct Foreach {
    pub op: Pointwise,
    pub items: Vec<Item>,
}

impl Foreach {
    pub(crate) fn run(&self) {
        for item in &self.items {
            elementwise::parallel(item.n, |start, count| {
                let mut constants = [[0.0f32; BLOCK]; 3];
                for (k, input) in item.inputs.iter().enumerate() {
                    if let Operand::Constant(v) = input {
                        constants[k].fill(*v);
                    }
                }
                let mut done = 0;
                while done < count {
                    let len = (count - done).min(BLOCK);
                    let at = |base: usize| (base as *mut f32).wrapping_add(start + done);
                    // An input the operation does not have reads the output (never used).
                    let mut ins = [at(item.out).cast_const(); 3];
                    for (k, input) in item.inputs.iter().enumerate() {
                        ins[k] = match input {
                            Operand::Memory(base) => at(*base).cast_const(),
                            Operand::Constant(_) => constants[k].as_ptr(),
                        };
                    }
                    // SAFETY: the launch checked each tensor's n elements against its
                    // allocation; constants are BLOCK long.
                    unsafe { compute(self.op, item.scalars, ins, at(item.out), len) };
                    done += len;
                }
            });
        }
    }
}
