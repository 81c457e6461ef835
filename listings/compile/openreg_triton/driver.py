"""The Triton driver for openreg: what Triton asks of the device at run time."""

import os
import sys

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

BACKEND = "openreg"


# ANCHOR: driver
class OpenRegDriver(DriverBase):
    """Target, current device and stream, and benchmarking for Triton on openreg."""

    @classmethod
    def is_active(cls) -> bool:
        # Triton takes the one active driver. Our device is always present, so we step aside
        # when a machine has a real GPU backend; TRITON_DEFAULT_BACKEND=openreg picks us there.
        # The device is present once its package is loaded (autoload, or an import).
        if "torch_openreg" not in sys.modules:
            return False
        if os.environ.get("TRITON_DEFAULT_BACKEND") == BACKEND:
            return True
        from triton.backends import backends

        return not any(name != BACKEND and backend.driver.is_active() for name, backend in backends.items())

    def get_current_target(self) -> GPUTarget:
        # arch names the code generation; Triton keys its caches on the target.
        return GPUTarget(BACKEND, "interpreter", 1)

    def get_active_torch_device(self):
        import torch

        return torch.device(BACKEND, torch.openreg.current_device())

    def get_current_device(self) -> int:
        import torch

        return torch.openreg.current_device()

    def set_current_device(self, device: int) -> None:
        import torch

        torch.openreg.set_device(device)

    def get_current_stream(self, device=None) -> int:
        import torch

        return torch.accelerator.current_stream(device).stream_id

    # ANCHOR_END: driver
    def get_device_interface(self):
        import torch

        return torch.openreg

    def get_benchmarker(self):
        from triton.testing import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self):
        import torch

        # do_bench writes this between runs to evict caches (CUDA's size: 256 MB).
        return torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=self.get_active_torch_device())

    def clear_cache(self, cache) -> None:
        cache.zero_()

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError(
            f"openreg has no native Triton launcher (asked for the C++ type of {ty!r}): its kernels run in "
            "Triton's interpreter")
