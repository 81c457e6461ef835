"""OpenReg at the "torch.compile" stage: Dynamo's device interface and an Inductor backend."""

import os

# ANCHOR: triton_interpret
# Inductor's Triton kernels for this device run in Triton's interpreter, which Triton chooses
# when a kernel function is defined, its own library included: before anything imports triton.
# (A device with a Triton compiler of its own sets nothing here.)
os.environ.setdefault("TRITON_INTERPRET", "1")
# ANCHOR_END: triton_interpret

import torch  # noqa: E402  (after the Triton setting)

import torch_openreg._C  # registers allocator, guard and operators
import torch_openreg.openreg
import torch_openreg.amp
import torch_openreg.compile
import torch_openreg.custom_ops  # noqa: F401  (Meta kernel and autograd of openreg::custom_abs)

torch.utils.rename_privateuse1_backend("openreg")
torch._register_device_module("openreg", torch_openreg.openreg)
# torch.openreg.amp, and the function torch.autocast looks for on torch.openreg itself.
torch_openreg.openreg.amp = torch_openreg.amp
torch_openreg.openreg.get_amp_supported_dtype = torch_openreg.amp.get_amp_supported_dtype
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
# ANCHOR: install
# Inductor looks for its vendor hook on torch.openreg; Dynamo's interface is registered when
# Dynamo loads (install() sets that up without importing Dynamo now).
torch_openreg.openreg._inductor_backend_init = torch_openreg.compile._inductor_backend_init
torch_openreg.compile.install()
# ANCHOR_END: install


def _autoload():
    """The `torch.backends` entry point: importing the package did the work."""
