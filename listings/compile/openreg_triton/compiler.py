"""The Triton compiler backend for openreg: options and target, and no compilation stages.

A vendor's backend adds stages that lower Triton IR to its binary (``add_stages``) and maps
``triton.language.extra.libdevice`` to its math library (``get_module_map``). Triton runs
openreg's kernels in its interpreter, which never calls either.
"""

import dataclasses
import hashlib

import triton
from triton.backends.compiler import BaseBackend, GPUTarget


@dataclasses.dataclass(frozen=True)
class OpenRegOptions:
    """The options Triton and Inductor read from a backend (names as CUDA's)."""

    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 1
    warp_size: int = 1
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: tuple = ()
    deprecated_fp8_dot_operand_dtypes: tuple = ()
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: tuple = ("ieee",)
    max_num_imprecise_acc_default: int = 0
    extern_libs: tuple = ()
    debug: bool = False
    sanitize_overflow: bool = False
    backend_name: str = "openreg"
    arch: str = "interpreter"
    instrumentation_mode: str = ""

    def hash(self) -> str:
        return hashlib.sha256(repr(dataclasses.astuple(self)).encode()).hexdigest()


# ANCHOR: backend
class OpenRegBackend(BaseBackend):
    @staticmethod
    def supports_target(target: GPUTarget) -> bool:
        return target.backend == "openreg"

    def hash(self) -> str:
        return f"openreg-interpreter-triton-{triton.__version__}"

    def parse_options(self, options: dict) -> OpenRegOptions:
        known = OpenRegOptions.__dataclass_fields__
        return OpenRegOptions(**{k: v for k, v in options.items() if k in known and v is not None})

    def get_codegen_implementation(self, options):
        return {}

    def pack_metadata(self, metadata):
        return ()

    def add_stages(self, stages, options, language) -> None:
        raise RuntimeError(
            "openreg has no Triton compiler: its Triton kernels run in Triton's interpreter. Set "
            "TRITON_INTERPRET=1 before triton is imported (importing torch_openreg sets it)")

    def load_dialects(self, context) -> None:
        pass

    def get_module_map(self) -> dict:
        from . import libdevice  # not at import: Triton imports this module while it loads

        return {"triton.language.extra.libdevice": libdevice}
# ANCHOR_END: backend
