"""Inductor's C++ path for openreg: the CPU's C++ kernels, launched on the device's stream.

The path for a device whose memory is host memory (``OPENREG_INDUCTOR=cpp``, the default; the
Triton path is in ``torch_openreg.inductor_backend``). We reuse Inductor's C++ code generation
and change what happens around a kernel: it is compiled into a plain C library, and the
generated wrapper calls it through a launcher that hands the runtime's read/write view of each
tensor's memory to the kernel and runs it on the current stream's worker, in order with all
other device work. Inductor has no public hook for four things this path needs; ``PATCHES``
lists them, and they act only while this path is the one registered for the device.
"""

import ctypes
import functools
import importlib
import inspect

import torch

from .. import _C
from ._aoti import cpp_wrapper_class, kernel_entry_declaration


# ANCHOR: launcher
class CompiledKernel:
    """What the generated wrapper calls: a compiled C kernel, launched on the device."""

    # A kernel touching fewer elements runs on one thread: an OpenMP team's start and join
    # cost more than they save there (bench/compile.py measures both sides of this).
    TEAM_FROM_ELEMENTS = 1 << 20

    def __init__(self, arg_types, source):
        bad = [t for t in arg_types if not (t.endswith("*") or "int64_t" in t)]
        if bad:
            raise NotImplementedError(f"openreg kernels take pointers and int64_t sizes, not {bad}")
        from torch._inductor.async_compile import AsyncCompile, get_compile_threads

        # As Inductor's own kernels: compiled on its workers, the first call waiting for the
        # result, or here and now when it has none (submitting to no workers would compile
        # under a lock the compile itself takes).
        if get_compile_threads() > 1:
            self.library = kernel_library().load_async(source, submit_fn=AsyncCompile.submit)
        else:
            self.library = kernel_library().load_async(source)
            self.library()
        self.address = None
        self.team = torch.get_num_threads()

    def __call__(self, *args):
        if self.address is None:
            self.address = ctypes.cast(self.library().kernel, ctypes.c_void_p).value
        _C._launch_compiled(self.address, args, self.team, self.TEAM_FROM_ELEMENTS)
# ANCHOR_END: launcher


# ANCHOR: kernel_library
@functools.cache
def kernel_library():
    """Inductor's cache of compiled C++ libraries, with the header the CPU's kernels precompile.
    Every kernel includes `cpp_prefix.h`, which takes most of a kernel's compile time to parse;
    Inductor precompiles it for the kernels it binds to Python, not for plain libraries.
    `_get_uncompiled_header` is the class's own hook for choosing that header."""
    from torch._inductor.codecache import CppCodeCache

    class OpenRegKernelLibrary(CppCodeCache):
        cache = {}
        cache_clear = staticmethod(cache.clear)

        @classmethod
        def _get_uncompiled_header(cls, device: str) -> str:
            return "torch/csrc/inductor/cpp_prefix.h"

    return OpenRegKernelLibrary
# ANCHOR_END: kernel_library


# ANCHOR: barrier
def exception_barrier(name: str, arg_types, body: str = "kernel_body", entry: str = "kernel",
                      threads_argument: bool = True) -> str:
    """The C function the launcher calls, around Inductor's kernel (renamed `kernel_body`).
    Generated C++ throws on a failed check (an indirect index out of bounds, an integer
    division by zero); an exception that unwinds into the Rust stream worker aborts the
    process. This function never throws: it returns 0, or the failure's class (2 for an index
    out of bounds, which eager code raises as IndexError, 1 otherwise) with its message, which
    the stream reports at the next synchronize. The arguments (pointers and int64 sizes)
    arrive as one array, so one Rust call covers every kernel; the launcher appends the number
    of threads for this launch (`threads_argument`), a packaged model's kernels run on one."""
    args = ", ".join(f"({t})(args[{i}])" for i, t in enumerate(arg_types))
    where = f" (compiled kernel {name})"
    # Kernels run on a stream's worker thread, between our own multi-threaded kernels (gemm,
    # reductions). OpenMP's team size is the calling thread's: set it when it differs.
    wanted = f"static_cast<int>(args[{len(arg_types)}])" if threads_argument else "1"
    threads = f"""  const int threads = {wanted};
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
"""
    return f"""
#include <cstdlib>
#include <cstring>
#include <string>
#include <omp.h>
extern "C" int {entry}(const uint64_t* args, char** message) noexcept {{
{threads}  try {{
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


# ANCHOR: init
@functools.cache
def scheduling():
    """Inductor's C++ scheduling, with kernels compiled into a plain C library and launched."""
    from torch._inductor import config
    from torch._inductor.codegen.common import IndentedBuffer
    from torch._inductor.codegen.cpp import CppScheduling
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
                barrier = exception_barrier(name, arg_types, body=body_name, entry=name, threads_argument=False)
                wrapper.define_kernel(name, source + barrier, gpu=False,
                                      cpp_definition=kernel_entry_declaration(name))
                return name
            wrapper.add_import_once("from torch_openreg.openreg._inductor import CompiledKernel")
            body = IndentedBuffer()
            body.writeline(f"CompiledKernel({arg_types!r}, r'''")
            body.splice(source + exception_barrier(name, arg_types), strip=True)
            body.writeline("''')")
            wrapper.define_kernel(name, body.getvalue(), gpu=False)
            return name
    # ANCHOR_END: scheduling
    return OpenRegScheduling
# ANCHOR_END: init


# ANCHOR: register
def register(wrapper_codegen, device_op_overrides) -> None:
    """Registers the C++ path for the device, and the replacements PATCHES lists."""
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides

    register_backend_for_device("openreg", scheduling(), wrapper_codegen, cpp_wrapper_class())
    register_device_op_overrides("openreg", device_op_overrides)
    for patch in PATCHES:
        patch.install()


def active() -> bool:
    """Whether the C++ path is the one registered for the device (the patches act only then)."""
    from torch._inductor.codegen.common import get_scheduling_for_device

    return get_scheduling_for_device("openreg") is scheduling()
# ANCHOR_END: register


# ANCHOR: patches
class Patch:
    """One function internal to Inductor that the C++ path replaces, for openreg only.

    `signature` is the original's, as checked against torch `checked_with`; the test suite
    (test_compile.py) fails when the installed torch's differs, or when the original's answer
    for openreg (which the replacement exists to change) is no longer what `why` says."""

    checked_with = "2.15.0"

    def __init__(self, module: str, qualname: str, signature: str, why: str, make):
        self.module, self.qualname, self.signature, self.why, self.make = module, qualname, signature, why, make

    def owner_and_name(self):
        owner = importlib.import_module(self.module)
        *path, name = self.qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, name

    def original(self):
        owner, name = self.owner_and_name()
        function = inspect.getattr_static(owner, name)
        function = getattr(function, "__func__", function)
        return getattr(function, "openreg_original", function)

    def install(self) -> None:
        owner, name = self.owner_and_name()
        current = inspect.getattr_static(owner, name)
        if getattr(getattr(current, "__func__", current), "openreg_original", None) is not None:
            return
        original = getattr(current, "__func__", current)
        replacement = self.make(original)
        replacement.openreg_original = original
        setattr(owner, name, staticmethod(replacement) if isinstance(current, staticmethod) else replacement)


def _is_cpu(original):
    def is_cpu(node) -> bool:
        device = node.get_device()
        if device is not None and device.type == "openreg" and active():
            return True
        return original(node)

    return is_cpu


def _get_current_backend(original):
    def get_current_backend(device_type=None):
        from torch._inductor.virtualized import V

        device_type = device_type or V.graph.get_current_device_or_throw().type
        if device_type == "openreg" and active():
            return "cpp"
        return original(device_type)

    return get_current_backend


def _decide_layout_opt(original):
    def decide_layout_opt(gm, *, is_inference):
        if active():
            for node in gm.graph.nodes:
                value = node.meta.get("val")
                if isinstance(value, torch.Tensor) and value.device.type == "openreg":
                    return False
        return original(gm, is_inference=is_inference)

    return decide_layout_opt


def _get_cpp_wrapper_header(original):
    def get_cpp_wrapper_header(device, aot_mode=False):
        if device.split(":")[0] == "openreg" and active():
            return "torch/csrc/inductor/aoti_include/common.h"
        return original(device, aot_mode=aot_mode)

    return get_cpp_wrapper_header


PATCHES = [
    Patch("torch._inductor.scheduler", "BaseSchedulerNode.is_cpu", "(self) -> 'bool'",
          "The scheduler picks its fusion rules by node.is_cpu(), which means device type cpu. Our "
          "kernels are the CPU's C++ kernels and need the CPU's rules (the GPU rules assume loop "
          "groups the C++ kernels do not have, and fail). Answers True for openreg nodes.", _is_cpu),
    Patch("torch._inductor.utils", "get_current_backend", "(device_type: 'str | None' = None) -> 'str'",
          "Inductor names a device's kernel language by device type: cpp for cpu, and "
          "config.cuda_backend (triton) for a type it does not know. Type propagation and float16 "
          "handling follow the name. Answers cpp for openreg.", _get_current_backend),
    Patch("torch._inductor.codegen.common", "get_current_backend",
          "(device_type: 'str | None' = None) -> 'str'",
          "The same function, imported by name into the code generator's common module.",
          _get_current_backend),
    Patch("torch._inductor.graph", "GraphLowering.decide_layout_opt",
          "(gm: 'GraphModule', *, is_inference: 'bool') -> 'bool'",
          "Layout optimization turns a graph with convolutions channels-last by GPU heuristics. Our "
          "convolution kernel computes on contiguous tensors and would copy each channels-last input "
          "back on every call. Answers False for a graph whose tensors are on openreg.", _decide_layout_opt),
    Patch("torch._inductor.codecache", "_get_cpp_wrapper_header", "(device: 'str', aot_mode: 'bool' = False) -> 'str'",
          "AOTInductor precompiles the header torch ships for the device (aoti_include/<device>.h); the "
          "wheel has none for an out-of-tree device. Ours is torch's common part plus our shim, which "
          "the generated code carries inline. Answers the common header for openreg.", _get_cpp_wrapper_header),
]
# ANCHOR_END: patches
