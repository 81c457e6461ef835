"""The Python half of openreg::custom_abs: a Meta ("fake") kernel, so shape propagation and
torch.compile can run it without the device, and its autograd formula."""

import torch


# ANCHOR: custom_abs_python
@torch.library.register_fake("openreg::custom_abs")
def _custom_abs_fake(input):
    torch._check(input.dtype == torch.float32,
                 lambda: f"openreg::custom_abs expects float32, got {input.dtype}")
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (input,) = ctx.saved_tensors
    return grad * input.sign()


torch.library.register_autograd("openreg::custom_abs", _backward, setup_context=_setup)
# ANCHOR_END: custom_abs_python
