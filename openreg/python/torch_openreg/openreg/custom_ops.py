"""The Python half of the `openreg::` operators: Meta ("fake") kernels, which let
torch.compile and shape propagation run them without the device, and autograd formulas."""

import torch

# ANCHOR: custom_abs_python
@torch.library.register_fake("openreg::custom_abs")
def _custom_abs_fake(input):
    torch._check(input.dtype == torch.float32, lambda: f"openreg::custom_abs supports float32 tensors, got {input.dtype}")
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _custom_abs_setup(ctx, inputs, output):
    (input,) = inputs
    ctx.save_for_backward(input)


def _custom_abs_backward(ctx, grad):
    (input,) = ctx.saved_tensors
    return grad * input.sign()


torch.library.register_autograd("openreg::custom_abs", _custom_abs_backward, setup_context=_custom_abs_setup)
# ANCHOR_END: custom_abs_python
