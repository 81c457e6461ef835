"""torch.compile's view of the device: a Dynamo ``DeviceInterface`` for openreg, and the Dynamo
backend named ``openreg``.

Importing Dynamo costs about a second, so ``import torch`` must not do it. The interface is
registered the moment Dynamo's device-interface module finishes loading (a post-import hook,
installed by ``install()``); the backend is found through the ``torch_dynamo_backends`` entry
point when a user names it.
"""

import importlib.abc
import importlib.machinery
import sys

import torch


# ANCHOR: interface
def _interface():
    from torch._dynamo.device_interface import DeviceInterface

    openreg = torch.openreg

    class OpenRegInterface(DeviceInterface):
        """What Dynamo and Inductor ask of a device, answered by torch.openreg."""

        device = openreg.device
        Stream = openreg.Stream
        Event = openreg.Event

        class Worker:
            # Inductor's compile workers ask these without touching the device.
            @staticmethod
            def set_device(device: int) -> None:
                openreg.set_device(device)

            @staticmethod
            def current_device() -> int:
                return openreg.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return openreg.get_device_properties(device)

        current_device = staticmethod(openreg.current_device)
        set_device = staticmethod(openreg.set_device)
        device_count = staticmethod(openreg.device_count)
        is_available = staticmethod(openreg.is_available)
        synchronize = staticmethod(openreg.synchronize)
        current_stream = staticmethod(openreg.current_stream)
        set_stream = staticmethod(openreg.set_stream)
        stream = staticmethod(openreg.stream)
        memory_allocated = staticmethod(openreg.memory_allocated)

        @staticmethod
        def exchange_device(device: int) -> int:
            return openreg._C.exchange_device(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return openreg._C.exchange_device(device) if device >= 0 else -1

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            torch.accelerator.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                                      device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            """The runtime's handle of the current stream (what generated code passes on)."""
            return torch.accelerator.current_stream(device_idx).native_handle

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return ""  # one kind of device: nothing to tell apart

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            # Triton can run kernels for the device when it has found our backend plugin.
            from triton.backends import backends

            return "openreg" in backends

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @classmethod
        def get_cache_system_info(cls):
            # Part of Inductor's cache key: code compiled by another version of our code
            # generation (or against another torch) must not be reused.
            import hashlib
            from pathlib import Path

            from torch_openreg import inductor_backend

            here = Path(__file__).parent
            codegen = b"".join(p.read_bytes() for p in (
                here / "_inductor.py", here / "_aoti.py", here.parent / "include" / "openreg_aoti.h",
                here.parent / "inductor_backend.py", *sorted((here.parent.parent / "openreg_triton").glob("*.py"))))
            return {"device": "openreg", "torch": openreg._C._torch_version, "path": inductor_backend.selected_path(),
                    "codegen": hashlib.sha256(codegen).hexdigest()[:16]}

    return OpenRegInterface
# ANCHOR_END: interface


def register_interface() -> None:
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device("openreg", _interface())


# ANCHOR: hook
class _AfterDynamoLoads(importlib.abc.MetaPathFinder):
    """Registers the interface right after torch._dynamo.device_interface has run, whoever
    imports it: before that nobody can ask for it, and importing it ourselves would make
    every `import torch` a second slower."""

    TARGET = "torch._dynamo.device_interface"

    def find_spec(self, name, path, target=None):
        if name != self.TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            register_interface()

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Called by torch.openreg at import."""
    if _AfterDynamoLoads.TARGET in sys.modules:
        register_interface()
    elif not any(isinstance(f, _AfterDynamoLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoLoads())
# ANCHOR_END: hook


# ANCHOR: backend
def openreg_backend(gm, example_inputs, **kwargs):
    """The Dynamo backend ``torch.compile(backend="openreg")``: AOTAutograd (FakeTensor tracing
    with the device's meta kernels, functionalization, forward/backward split) with the
    decompositions that turn operators the device lacks into operators it has, run eagerly."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def run(graph, inputs):
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=run, bw_compiler=run, decompositions=decompositions())(
        gm, example_inputs, **kwargs)


def decompositions():
    """Core ATen decompositions of the operators with no openreg kernel: their pieces may have
    one (addcdiv is an add, a multiplication and a division); the others still reach the CPU
    fallback, as in eager."""
    from torch._decomp import core_aten_decompositions

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return {op: fn for op, fn in core_aten_decompositions().items()
            if not has_kernel(op.name(), "PrivateUse1")}
# ANCHOR_END: backend
