"""Automatic mixed precision for openreg: ``torch.autocast("openreg")`` and
``torch.amp.GradScaler("openreg")``. The casting policies live in C++ (csrc/high_level/Autocast.cpp,
the AutocastPrivateUse1 dispatch key); PyTorch asks this module which dtypes autocast may use.
"""

import torch

__all__ = ["get_amp_supported_dtype"]


# ANCHOR: supported
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes ``torch.autocast("openreg", dtype=...)`` accepts: the Rust
    kernels compute in both (matrix products through gemm, elementwise through float32)."""
    return [torch.float16, torch.bfloat16]
# ANCHOR_END: supported
