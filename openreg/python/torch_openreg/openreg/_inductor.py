"""Inductor for openreg: ``torch.compile``'s default backend generates C++ kernels for the device.

Inductor calls ``torch.openreg._inductor_backend_init()`` the first time it compiles for the
device. We reuse Inductor's C++ code generation (the CPU's: our device computes on the host's
cores) and change what happens around a kernel: it is compiled into a plain C library, and the
generated wrapper calls it through a launcher that hands the runtime's read/write view of each
tensor's memory to the kernel and runs it on the current stream's worker, in order with all
other device work. Outputs are allocated by the wrapper with ``torch.empty_strided(...,
device="openreg")``: our caching allocator.
"""

import ctypes

import torch

from .. import _C
from ._aoti import cpp_wrapper_class, kernel_entry_declaration


# ANCHOR: launcher
class CompiledKernel:
    """What the generated wrapper calls: a compiled C kernel, launched on the device."""

    def __init__(self, arg_types, compiled):
        bad = [t for t in arg_types if not (t.endswith("*") or "int64_t" in t)]
        if bad:
            raise NotImplementedError(f"openreg kernels take pointers and int64_t sizes, not {bad}")
        self.compiled = compiled  # a ctypes function, or a future of one
        self.address = None

    def __call__(self, *args):
        if self.address is None:
            function = self.compiled.result() if hasattr(self.compiled, "result") else self.compiled
            self.address = ctypes.cast(function, ctypes.c_void_p).value
        _C._launch_compiled(self.address, [
            (True, a.data_ptr(), a.untyped_storage().data_ptr(), a.untyped_storage().nbytes())
            if isinstance(a, torch.Tensor) else (False, int(a), 0, 0)
            for a in args
        ])
# ANCHOR_END: launcher


# ANCHOR: barrier
def exception_barrier(name: str, arg_types, body: str = "kernel_body", entry: str = "kernel") -> str:
    """The C function the launcher calls, around Inductor's kernel (renamed `kernel_body`).
    Generated C++ throws on a failed check (an indirect index out of bounds, an integer
    division by zero); an exception that unwinds into the Rust stream worker aborts the
    process. This function never throws: it returns 0, or the failure's class (2 for an index
    out of bounds, which eager code raises as IndexError, 1 otherwise) with its message, which
    the stream reports at the next synchronize. The arguments (pointers and int64 sizes)
    arrive as one array, so one Rust call covers every kernel."""
    args = ", ".join(f"({t})(args[{i}])" for i, t in enumerate(arg_types))
    where = f" (compiled kernel {name})"
    return f"""
#include <cstdlib>
#include <cstring>
#include <string>
#include <omp.h>
extern "C" int {entry}(const uint64_t* args, char** message) noexcept {{
  // Kernels run on a stream's worker thread, between our own multi-threaded kernels (gemm,
  // reductions). An OpenMP team started here would keep spinning on the cores those need.
  static thread_local const bool serial = (omp_set_num_threads(1), true);
  (void)serial;
  try {{
    {body}({args});
    return 0;
  }} catch (const std::exception& e) {{
    // Keep the check's message. torch.compile's kernels use torch's header-only TORCH_CHECK,
    // which throws std::runtime_error("<function>, <file>:<line>, <message>"); a packaged
    // model's (AOTInductor) use libc10's, whose c10::Error reads "<message>\\nException raised
    // from ..." and a backtrace. Inductor's bounds check on an indirect index is the one eager
    // code raises as IndexError.
    std::string what = e.what();
    size_t trace = what.find("\\nException raised from ");
    if (trace != std::string::npos) {{
      what = what.substr(0, trace);
    }} else {{
      size_t file = what.find(", "), text = file == std::string::npos ? file : what.find(", ", file + 2);
      if (text != std::string::npos && what.find(':', file) < text) what = what.substr(text + 2);
    }}
    *message = strdup((what + "{where}").c_str());
    return what.rfind("index out of bounds", 0) == 0 ? 2 : 1;
  }} catch (...) {{
    *message = strdup("unknown C++ exception{where}");
    return 1;
  }}
}}
"""
# ANCHOR_END: barrier


def get_raw_stream(device_index: int) -> int:
    return torch.accelerator.current_stream(device_index).native_handle


# ANCHOR: init
def init() -> None:
    from torch._inductor import config
    from torch._inductor.codegen.common import (
        DeviceOpOverrides,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_utils import DTYPE_TO_CPP  # noqa: F401  (imports cpp codegen)
    from torch._inductor.codegen.common import IndentedBuffer
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.utils import Placeholder, get_fused_kernel_name
    from torch._inductor.virtualized import V

    # ANCHOR: scheduling
    class OpenRegScheduling(CppScheduling):
        """Inductor's C++ kernels, compiled into a plain C library and wrapped for launch."""

        def define_kernel(self, src_code, nodes, kernel_args=None):
            wrapper = V.graph.wrapper_code
            if src_code in wrapper.src_to_kernel:
                return wrapper.src_to_kernel[src_code]
            fused = get_fused_kernel_name(nodes, config.cpp.descriptive_names) if config.cpp.descriptive_names else ""
            name = "_".join(["cpp", fused, wrapper.next_kernel_suffix()])
            wrapper.src_to_kernel[src_code] = name
            # A packaged model (AOTInductor) has all its kernels in one file: each needs its own name.
            body_name = f"{name}_body" if V.graph.cpp_wrapper else "kernel_body"
            source = (src_code.replace(str(Placeholder.KERNEL_NAME), body_name)
                      .replace(str(Placeholder.DESCRIPTIVE_NAME), name).replace("#pragma CMT", "//"))
            _, _, arg_types = (self.kernel_group.args if kernel_args is None else kernel_args).cpp_argdefs()
            if V.graph.cpp_wrapper:
                # AOTInductor: the kernel and its entry point go into the model's C++; the
                # wrapper launches the entry point through the backend (_aoti.py).
                barrier = exception_barrier(name, arg_types, body=body_name, entry=name)
                wrapper.define_kernel(name, source + barrier, gpu=False,
                                      cpp_definition=kernel_entry_declaration(name))
                return name
            wrapper.add_import_once("from torch_openreg.openreg._inductor import CompiledKernel")
            body = IndentedBuffer()
            body.writeline(f"CompiledKernel({arg_types!r}, async_compile.cpp(r'''")
            body.splice(source + exception_barrier(name, arg_types), strip=True)
            body.writeline("'''))")
            wrapper.define_kernel(name, body.getvalue(), gpu=False)
            return name
    # ANCHOR_END: scheduling

    class OpenRegWrapperCodegen(PythonWrapperCodegen):
        """The Python wrapper, with kernel calls for the device."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                raise NotImplementedError("openreg: Inductor subgraphs are not supported")
            return OpenRegWrapperCodegen()

        def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
            # Inductor names only the device type and relies on a device guard, which it
            # writes for GPU-class devices only: name the index instead.
            line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
            if device.type == "openreg" and device.index is not None:
                line = line.replace("device='openreg'", f"device='{device}'")
            return line

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if device.type == "openreg" and not triton:
                self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                return
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)

    class OpenRegDeviceOpOverrides(DeviceOpOverrides):
        """The snippets the wrapper writes for the device."""

        def import_get_raw_stream_as(self, name):
            return f"from torch_openreg.openreg._inductor import get_raw_stream as {name}"

        def set_device(self, device_idx):
            return f"torch.openreg.set_device({device_idx})"

        def synchronize(self):
            return "torch.openreg.synchronize()"

        def device_guard(self, device_idx):
            return f"torch.openreg.device({device_idx})"

        def aten_device_type(self):
            return "at::kPrivateUse1"

        def cpp_kernel_type(self):
            # AOTInductor's kernel table: our kernels are plain C functions, as the CPU's.
            return "void*"

    register_backend_for_device("openreg", OpenRegScheduling, OpenRegWrapperCodegen, cpp_wrapper_class())
    register_device_op_overrides("openreg", OpenRegDeviceOpOverrides())

    # Inductor's scheduler picks its fusion rules by `node.is_cpu()`, which means "device type
    # cpu"; our kernels are the CPU's C++ kernels, so they need the CPU's rules (the others
    # assume GPU-style loop groups and fail). This and the three below replace functions
    # internal to Inductor, which may change in any release: they are tested with torch 2.15.
    from torch._inductor.scheduler import BaseSchedulerNode

    def is_cpu(node) -> bool:
        device = node.get_device()
        return device is not None and device.type in ("cpu", "openreg")

    BaseSchedulerNode.is_cpu = is_cpu

    # Inductor names a device's kernel language by device type: "cpp" for cpu, and
    # config.cuda_backend ("triton") for a type it does not know. Its type propagation and
    # float16 handling follow that name, so for our C++ kernels it must say "cpp".
    import torch._inductor.codegen.common as common
    import torch._inductor.utils as utils

    for module in (utils, common):
        if not getattr(module.get_current_backend, "openreg", False):
            module.get_current_backend = _cpp_for_openreg(module.get_current_backend)

    # Inductor's layout optimization turns a graph with convolutions channels-last by GPU
    # heuristics (GraphLowering.decide_layout_opt). Our convolution kernel computes on
    # contiguous tensors and would copy each channels-last input and weight back on every call:
    # keep openreg graphs in the layout their tensors have.
    from torch._inductor.graph import GraphLowering

    if not getattr(GraphLowering.decide_layout_opt, "openreg", False):
        GraphLowering.decide_layout_opt = staticmethod(_no_layout_opt_for_openreg(GraphLowering.decide_layout_opt))

    # AOTInductor precompiles the header torch ships for the device (aoti_include/<device>.h);
    # the wheel has none for an out-of-tree device. Ours is torch's common part plus our shim,
    # which the generated code carries inline: precompile the common part.
    import torch._inductor.codecache as codecache

    if not getattr(codecache._get_cpp_wrapper_header, "openreg", False):
        codecache._get_cpp_wrapper_header = _common_header_for_openreg(codecache._get_cpp_wrapper_header)


def _cpp_for_openreg(get_current_backend):
    """get_current_backend, answering "cpp" for openreg."""
    from torch._inductor.virtualized import V

    def wrapped(device_type=None):
        device_type = device_type or V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == "openreg" else get_current_backend(device_type)

    wrapped.openreg = True
    return wrapped


def _no_layout_opt_for_openreg(decide_layout_opt):
    """decide_layout_opt, answering False for a graph whose tensors are on openreg."""

    def wrapped(gm, *, is_inference):
        for node in gm.graph.nodes:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.device.type == "openreg":
                return False
        return decide_layout_opt(gm, is_inference=is_inference)

    wrapped.openreg = True
    return wrapped


def _common_header_for_openreg(get_cpp_wrapper_header):
    """_get_cpp_wrapper_header, answering torch's common AOTInductor header for openreg."""

    def wrapped(device, aot_mode=False):
        if device.split(":")[0] == "openreg":
            return "torch/csrc/inductor/aoti_include/common.h"
        return get_cpp_wrapper_header(device, aot_mode=aot_mode)

    wrapped.openreg = True
    return wrapped
# ANCHOR_END: init
