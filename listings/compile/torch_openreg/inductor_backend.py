"""Inductor's Triton path for openreg: what torch.compile's default backend generates for the device.

Inductor asks a device for three things, each registered through a public function of
torch._inductor.codegen.common: a scheduling (the kernel code generator: Inductor's own
TritonScheduling), a wrapper code generator (the Python that allocates buffers and launches
kernels) and device op overrides (the snippets that wrapper writes). Triton runs the kernels
through the Triton backend of the package openreg_triton, in Triton's interpreter.
Importing this module registers them (torch.openreg._inductor_backend_init imports it).
"""

import os

import torch
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen


# ANCHOR: overrides
class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """The snippets the wrapper writes for the device."""

    def import_get_raw_stream_as(self, name):
        return f"from torch_openreg.inductor_backend import get_raw_stream as {name}"

    def set_device(self, device_idx):
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self):
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.openreg.device({device_idx})"


def get_raw_stream(device_index: int) -> int:
    """The device's current stream, as every kernel launch is given it. A launcher that
    enqueues a binary resolves it to the runtime's stream (a device whose guard implements
    getStreamNativeHandle returns that handle, as CUDA's does)."""
    return torch.accelerator.current_stream(device_index).stream_id
# ANCHOR_END: overrides


# ANCHOR: wrapper
class OpenRegWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper, with what the device needs around its kernels."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            from torch._inductor.codegen.wrapper import SubgraphPythonWrapperCodegen

            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return OpenRegWrapperCodegen()

    def write_header(self):
        super().write_header()
        self.header.writeline("import torch_openreg.inductor_backend")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        # Inductor names only the device type and relies on a device guard, which it writes for
        # GPU-class devices only: without the index, openreg:1's outputs would land on openreg:0.
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == "openreg" and device.index is not None:
            line = line.replace("device='openreg'", f"device='{device}'")
        return line

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
        # The kernels' math functions come from libdevice, which Triton's interpreter cannot
        # run (triton-lang/triton#8825): point them at ours. A compiled backend maps libdevice
        # to its math library itself (the compiler's get_module_map).
        if gpu:
            kernel_body = kernel_body.replace(
                "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
                "from torch._inductor.runtime.triton_helpers import math as tl_math\n"
                "from openreg_triton import libdevice")
            kernel_body = f"torch_openreg.inductor_backend.InterpretedKernel({kernel_body})"
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)
# ANCHOR_END: wrapper


# ANCHOR: interpreted
class InterpretedKernel:
    """A Triton kernel run by the interpreter, with a failed device assert raised as eager
    code raises it. Inductor checks each indirect index with tl.device_assert; a device reports
    a failed one as an error of the launch, and eager code raises IndexError."""

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, *args, **kwargs):
        from triton.runtime.errors import InterpreterError

        try:
            return self.kernel.run(*args, **kwargs)
        except InterpreterError as error:
            message = f"{str(error.__cause__ or error).strip()} (Triton kernel {self.kernel.fn.__name__})"
            if "index out of bounds" in message:
                raise IndexError(message) from None
            raise RuntimeError(message) from error

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def _interpret_with_asserts() -> None:
    """Inductor compiles its Triton kernels with debug=True, which turns on the device_assert
    that checks each indirect index (_should_enable_triton_debug_asserts in
    torch/_inductor/runtime/triton_heuristics.py). The interpreter takes no compile options:
    its builder's are fixed (InterpreterOptions in triton/runtime/interpreter.py), asserts off."""
    import dataclasses

    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if not builder.options.debug:
        builder.options = dataclasses.replace(builder.options, debug=True)
# ANCHOR_END: interpreted


# ANCHOR: register
def _check_interpreter() -> None:
    """Triton's own functions (tl.sum, ...) must have been defined in interpreter mode."""
    import triton.language.standard
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(triton.language.standard.sum, InterpretedFunction):
        raise RuntimeError(
            "openreg's Triton kernels run in Triton's interpreter, which Triton chooses when it is "
            "imported: import torch (or torch_openreg) before triton, or set TRITON_INTERPRET=1 "
            f"in the environment (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r})")


def register() -> None:
    """Registers Inductor's Triton code generation for the device: nothing of torch is replaced."""
    _check_interpreter()
    _interpret_with_asserts()
    register_backend_for_device("openreg", TritonScheduling, OpenRegWrapperCodegen)
    register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())


register()
# ANCHOR_END: register
