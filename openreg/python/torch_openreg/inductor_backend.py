"""openreg's Inductor backend: what ``torch.compile``'s default backend generates for the device.

Inductor asks a device for three things, each registered through a public function of
``torch._inductor.codegen.common``: a scheduling (the kernel code generator), a wrapper code
generator (the Python that allocates buffers and launches kernels) and device op overrides (the
snippets that wrapper writes for the device). Inductor calls ``torch.openreg._inductor_backend_init()``
the first time it compiles for the device, which imports this module; importing it registers.

Two paths, chosen by ``OPENREG_INDUCTOR`` when this module is first imported:

- ``triton``: Inductor's own ``TritonScheduling``, the path of GPU-class devices. Triton runs the
  kernels through the Triton backend this package registers (``openreg_triton``), in
  Triton's interpreter. Nothing of torch is replaced on this path.
- ``cpp`` (the default): Inductor's C++ kernels run on the stream's worker
  (``torch_openreg.openreg._inductor``), the path for a device whose memory is host memory.
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
from torch._inductor.virtualized import V

import torch_openreg

PATHS = ("cpp", "triton")


# ANCHOR: overrides
class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """The snippets the wrapper writes for the device."""

    def import_get_raw_stream_as(self, name):
        return f"from torch_openreg.inductor_backend import get_raw_stream as {name}"

    def set_device(self, device_idx):
        return f"torch_openreg._C._set_device({device_idx})"

    def synchronize(self):
        # Written after each kernel under config.triton.debug_sync_kernel: device work is
        # asynchronous, so this waits for it (the reference's host-synchronous kernels write "pass").
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.openreg.device({device_idx})"

    def aten_device_type(self):
        return "at::kPrivateUse1"

    def cpp_kernel_type(self):
        # AOTInductor's kernel table: our C++ kernels are plain C functions, as the CPU's.
        return "void*"
# ANCHOR_END: overrides


def get_raw_stream(device_index: int) -> int:
    """The runtime's handle of the device's current stream: what a kernel launch is given."""
    return torch.accelerator.current_stream(device_index).native_handle


# ANCHOR: interpreted
class InterpretedKernel:
    """A Triton kernel run by the interpreter, with a device's failures raised as eager's.

    A device reports a failed ``tl.device_assert`` (Inductor's check of an indirect index) as
    an error of the launch; eager code raises IndexError for an index out of bounds. The
    interpreter raises an InterpreterError naming the assert's message."""

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, *args, **kwargs):
        from triton.runtime.errors import InterpreterError

        try:
            return self.kernel.run(*args, **kwargs)
        except InterpreterError as error:
            message = str(error.__cause__ or error)
            name = self.kernel.fn.__name__
            if "index out of bounds" in message:
                raise IndexError(f"{message.strip()} (Triton kernel {name})") from None
            raise RuntimeError(f"{message.strip()} (Triton kernel {name})") from error

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def _interpret_with_asserts() -> None:
    """Inductor compiles its Triton kernels with debug=True, which turns on the device_assert
    that checks each indirect index (torch/_inductor/runtime/triton_heuristics.py,
    _should_enable_triton_debug_asserts). The interpreter takes no compile options: its
    builder's are fixed (triton/runtime/interpreter.py, InterpreterOptions), with asserts off."""
    import dataclasses

    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if not builder.options.debug:
        builder.options = dataclasses.replace(builder.options, debug=True)
# ANCHOR_END: interpreted


# ANCHOR: wrapper
INTERPRETER_LIBDEVICE = "from openreg_triton import libdevice"


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
        self.header.writeline("import torch_openreg")

    def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
        # Inductor names only the device type and relies on a device guard, which it writes for
        # GPU-class devices only: name the index instead.
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == "openreg" and device.index is not None:
            line = line.replace("device='openreg'", f"device='{device}'")
        return line

    def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
        # Triton kernels call libdevice's math functions, which Triton's interpreter cannot run
        # (triton-lang/triton#8825): point them at ours. A compiled backend maps libdevice itself.
        if gpu and os.environ.get("TRITON_INTERPRET") == "1":
            kernel_body = kernel_body.replace(
                "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
                f"from torch._inductor.runtime.triton_helpers import math as tl_math\n{INTERPRETER_LIBDEVICE}")
            kernel_body = f"torch_openreg.inductor_backend.InterpretedKernel({kernel_body})"
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == "openreg" and not triton:
            # A C++ kernel: its launcher puts it on the stream (openreg._inductor.CompiledKernel).
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)
# ANCHOR_END: wrapper


# ANCHOR: register
def _check_interpreter() -> None:
    """Triton's own functions (tl.sum, ...) must have been defined in interpreter mode."""
    import triton.language.standard
    from triton.runtime.interpreter import InterpretedFunction

    if os.environ.get("TRITON_INTERPRET") != "1" or not isinstance(triton.language.standard.sum, InterpretedFunction):
        raise RuntimeError(
            "openreg's Triton path runs kernels in Triton's interpreter, which Triton must choose before "
            "it is imported: set OPENREG_INDUCTOR=triton (or TRITON_INTERPRET=1) in the environment "
            f"before the process starts (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r})")


def selected_path() -> str:
    path = os.environ.get("OPENREG_INDUCTOR", "cpp")
    if path not in PATHS:
        raise ValueError(f"OPENREG_INDUCTOR={path!r}: expected one of {', '.join(PATHS)}")
    return path


def register(path: str | None = None) -> None:
    """Registers Inductor's code generation for the device: the Triton path or the C++ path."""
    path = path or selected_path()
    if path not in PATHS:
        raise ValueError(f"Inductor path {path!r}: expected one of {', '.join(PATHS)}")
    if path == "triton":
        _check_interpreter()
        _interpret_with_asserts()
        register_backend_for_device("openreg", TritonScheduling, OpenRegWrapperCodegen)
        register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())
    else:
        from .openreg import _inductor

        _inductor.register(OpenRegWrapperCodegen, OpenRegDeviceOpOverrides())


register()
# ANCHOR_END: register
