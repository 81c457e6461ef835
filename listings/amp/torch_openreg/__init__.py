"""OpenReg at the "AMP" stage: torch.autocast("openreg") and torch.amp.GradScaler("openreg")."""

import torch

import torch_openreg._C  # registers allocator, guard and operators
import torch_openreg.openreg
import torch_openreg.amp
import torch_openreg.custom_ops  # noqa: F401  (Meta kernel and autograd of openreg::custom_abs)

torch.utils.rename_privateuse1_backend("openreg")
torch._register_device_module("openreg", torch_openreg.openreg)
# torch.openreg.amp, and the function torch.autocast looks for on torch.openreg itself.
torch_openreg.openreg.amp = torch_openreg.amp
torch_openreg.openreg.get_amp_supported_dtype = torch_openreg.amp.get_amp_supported_dtype
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _autoload():
    """The `torch.backends` entry point: importing the package did the work."""
