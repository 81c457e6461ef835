"""OpenReg: a simulated accelerator for PyTorch, written in Rust.

``import torch`` loads this package through the ``torch.backends`` entry point, after which
``torch.randn(3, device="openreg")`` works with no other import.
"""

import atexit
import ctypes
import os
import time


# ANCHOR: triton_interpret
# Inductor's Triton path (OPENREG_INDUCTOR=triton) runs kernels in Triton's interpreter. Triton
# decides when a function is defined, its own library included: before anything imports triton.
if os.environ.get("OPENREG_INDUCTOR") == "triton":
    os.environ.setdefault("TRITON_INTERPRET", "1")
# ANCHOR_END: triton_interpret

import torch  # noqa: E402  (after the Triton setting)

from ._version import TORCH_VERSION

# ANCHOR: version_check
# Check before loading _C: glue built for another torch can fail to load with an obscure
# "undefined symbol" error, or worse, load and misbehave.
if torch.__version__.split("+")[0] != TORCH_VERSION:
    raise ImportError(
        f"torch_openreg needs torch=={TORCH_VERSION}, but torch {torch.__version__} is "
        f"installed; install torch=={TORCH_VERSION} or rebuild torch_openreg against it"
    )
# ANCHOR_END: version_check

# ANCHOR: setup
import torch_openreg._C  # noqa: E402  (registers allocator, guard, hooks, operators)
import torch_openreg.openreg  # noqa: E402

# "privateuseone" becomes "openreg" in device strings, and torch.openreg is our module.
torch.utils.rename_privateuse1_backend("openreg")
torch._register_device_module("openreg", torch_openreg.openreg)
# Tensor.openreg(), Tensor.is_openreg, Module.openreg(), Storage.openreg(), ...
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
# Our generator has graphsafe_get_state/graphsafe_set_state/clone_state and torch.openreg has
# _get_generator and default_generators: AOTAutograd's graph-safe RNG may use it, as CUDA's.
torch._functorch._aot_autograd.utils.register_graphsafe_rng_device_type("openreg")
# ANCHOR_END: setup

# ANCHOR: global_symbols
# A model packaged by AOTInductor (a shared library torch loads later) finds the backend through
# one exported symbol, openreg_aoti_shim. Python loads extension modules with RTLD_LOCAL, which
# hides their symbols from libraries loaded afterwards: make ours global.
ctypes.CDLL(torch_openreg._C.__file__, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
# ANCHOR_END: global_symbols


# ANCHOR: dlpack
# torch 2.15's Tensor.__dlpack_device__ knows PrivateUse1 only by its original name
# "privateuse1" and raises after the rename; answer for our device, defer for the others.
_torch_dlpack_device = torch.Tensor.__dlpack_device__


def _dlpack_device(self):
    if self.device.type == "openreg":
        from torch.utils.dlpack import DLDeviceType

        return (DLDeviceType.kDLExtDev, self.device.index or 0)
    return _torch_dlpack_device(self)


torch.Tensor.__dlpack_device__ = _dlpack_device
# ANCHOR_END: dlpack


# ANCHOR: exit
# A PyTorch race at exit: an autograd device thread (one per openreg device, as for CUDA) may
# drop the last reference to a finished backward pass just after backward() returned, and
# that releases Python objects, which needs the interpreter. If the script has ended and
# Python is finalizing by then, the thread is killed inside C++ and the process aborts with
# "terminate called without an active exception" (seen about once in 60 short scripts).
# Giving the threads a few milliseconds before finalization closes the window.
def _let_autograd_threads_finish():
    time.sleep(0.01)


atexit.register(_let_autograd_threads_finish)
# ANCHOR_END: exit


# ANCHOR: autoload
def _autoload():
    """Entry point for ``torch.backends``: importing this package did all the work."""
# ANCHOR_END: autoload

