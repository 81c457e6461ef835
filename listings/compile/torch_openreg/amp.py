"""torch.openreg.amp: what torch.autocast("openreg", dtype=...) may use."""

import torch


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]
