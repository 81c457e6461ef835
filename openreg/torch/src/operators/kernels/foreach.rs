//! The `_foreach_*` operators: one elementwise operation over lists of tensors in a single
//! launch (CUDA's multi_tensor_apply), which is how optimizers update every parameter at once.
//! Each tensor is contiguous float32; an input may instead be a per-tensor constant (the
//! scalar of `_foreach_mul_(list, 0.9)`).

use openreg_runtime as rt;

use super::dtype::Dtype;
use super::elementwise::{self, BLOCK, compute};
use super::{launch, dense};
use crate::error::Result;
use crate::ffi::ffi::{Dense, Pointwise};

// ANCHOR: launch_foreach
/// Launches `op` over lists of contiguous float32 tensors in one go (see [`foreach`]). False,
/// having done nothing, if a tensor is of another dtype or size: C++ then runs per tensor.
pub(crate) fn launch_foreach(
    op: Pointwise, operands: &[Dense], constants: &[f64], scalars: &[f64], tensors: usize, device: i64,
) -> Result<bool> {
    let Some(arity) = elementwise::arity(op) else { return Ok(false) };
    let per = arity + 1;
    if operands.len() != tensors * per || constants.len() != operands.len() || scalars.len() != 2 * tensors {
        return Err(rt::Error::InvalidValue(format!("{op:?}: operand lists of mismatched lengths")).into());
    }
    let float = |t: &Dense| Dense::dtype_is(t, Dtype::Float);
    let mut items = Vec::with_capacity(tensors);
    for (i, ops) in operands.chunks_exact(per).enumerate() {
        let out = &ops[0];
        if !float(out) {
            return Ok(false);
        }
        let mut inputs = smallvec::SmallVec::new();
        for (k, t) in ops.iter().enumerate().skip(1) {
            inputs.push(match t.data {
                0 if t.numel == 0 => Operand::Constant(constants[i * per + k] as f32),
                _ if !float(t) || t.numel != out.numel => return Ok(false),
                _ => Operand::Memory(dense(t, Dtype::Float)?),
            });
        }
        if out.numel > 0 {
            let scalars = [scalars[2 * i] as f32, scalars[2 * i + 1] as f32];
            items.push(Item { out: dense(out, Dtype::Float)?, inputs, scalars, n: out.numel });
        }
    }
    let total = items.iter().map(|item| item.n).sum();
    let work = Foreach { op, items };
    launch(device, total, move || work.run())?;
    Ok(true)
}
// ANCHOR_END: launch_foreach

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
