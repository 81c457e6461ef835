"""AOTInductor for openreg: the C++ wrapper of a packaged model.

``torch._inductor.aoti_compile_and_package`` lowers an exported program with Inductor and
writes the wrapper in C++ instead of Python. We reuse the CPU's C++ wrapper and change what
is specific to a device: the header (our C shim, ``include/openreg_aoti.h``), the kernel
calls (launched on the current stream through the backend, never called directly: their
pointers are device addresses), and the device the model tells torch's runtime it runs on.
"""

from pathlib import Path

HEADER = Path(__file__).resolve().parent.parent / "include" / "openreg_aoti.h"


def kernel_entry_declaration(name: str) -> str:
    """The wrapper's declaration of a kernel's entry point (see ``exception_barrier``)."""
    return f'extern "C" int {name}(const uint64_t* args, char** message) noexcept;\n'


# ANCHOR: wrapper
def cpp_wrapper_class():
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    class OpenRegCppWrapper(CppWrapperCpu):
        """The C++ wrapper of a model compiled for openreg."""

        def __init__(self):
            self.device = "openreg"
            super().__init__()

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                raise NotImplementedError("openreg: AOTInductor subgraphs (control flow) are not supported")
            return OpenRegCppWrapper()

        @staticmethod
        def get_device_include_path_aot(device):
            if device != "openreg":
                return CppWrapperCpu.get_device_include_path_aot(device)
            return "#include <torch/csrc/inductor/aoti_include/common.h>\n" + HEADER.read_text()

        @staticmethod
        def get_device_include_path_jit(device):
            if device != "openreg":
                return CppWrapperCpu.get_device_include_path_jit(device)
            return '#error "openreg: the C++ wrapper is supported by AOTInductor only"'

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                         arg_types=None, **kwargs):
            if device is None or device.type != "openreg" or triton:
                return super()._generate_kernel_call_helper(
                    kernel_name, call_args, device=device, triton=triton, arg_types=arg_types, **kwargs)
            # A tensor goes as its handle (the backend translates its memory), a size as int64.
            args = [
                f"OpenRegKernelArg{{{arg}.get(), 0}}" if "*" in str(kind)
                else f"OpenRegKernelArg{{nullptr, static_cast<int64_t>({arg})}}"
                for arg, kind in zip(call_args, arg_types)
            ]
            self.writeline(f"openreg_launch({kernel_name}, {{{', '.join(args)}}});")

        def generate_input_output_runtime_checks(self):
            # The generated checks of each input's dtype, sizes, strides and device run only
            # when AOTI_RUNTIME_CHECK_INPUTS=1. An input on the wrong device or of the wrong
            # shape must give an error, not read past a buffer: for openreg they run unless
            # AOTI_RUNTIME_CHECK_INPUTS=0. The device check needs the type's number:
            # c10::DeviceType::PrivateUse1 (torch/headeronly/core/DeviceType.h).
            from torch._inductor.codegen import cpp_utils

            cpp_utils.DEVICE_TO_INT.setdefault("openreg", 20)
            super().generate_input_output_runtime_checks()
            buffer = getattr(self.prefix, "aot", self.prefix)
            off_unless_set = "const static bool result = env_var_value != nullptr && env_var_value[0] != '0';"
            on_unless_zero = "const static bool result = env_var_value == nullptr || env_var_value[0] != '0';"
            for i, line in enumerate(buffer._lines):
                if isinstance(line, str) and off_unless_set in line:
                    buffer._lines[i] = line.replace(off_unless_set, on_unless_zero)

        def _write_constants_unpacking(self):
            # As CppWrapperCpu writes it, except that a weight on the device is the device
            # copy of the host one, made by the first run.
            import torch
            from torch._inductor.virtualized import V

            inputs = len(V.graph.graph_inputs)
            for index, (name, value) in enumerate(V.graph.constants.items()):
                if isinstance(value, torch.Tensor) and value.device.type == "openreg":
                    self.prefix.writeline_aot(
                        f"[[maybe_unused]] auto {name} = ConstantHandle(openreg_aoti::on_device("
                        f"*constants_map_, constants_info_[{index}].name, constants_->at({index}), "
                        "device_idx_));")
                else:
                    self.prefix.writeline_aot(f"[[maybe_unused]] auto& {name} = constants_->at({index});")
                self.prefix.writeline_jit(
                    f"[[maybe_unused]] auto {name} = std::move(inputs[{inputs + index}]);")

        def codegen_model_constructor(self):
            # torch's runtime knows the device names cpu, cuda, xpu and mps only
            # (parse_device_str in aoti_runtime/model_base.h): the model starts as a CPU
            # model and then takes the device the loader asked for.
            start = len(self.prefix._lines)
            super().codegen_model_constructor()
            lines = self.prefix._lines
            # Its weights are loaded into host memory: they are CPU constants to the runtime
            # (see openreg_aoti::on_device).
            self.used_cached_devices.add("cpu")
            for i in range(start, len(lines)):
                if isinstance(lines[i], str) and ".device_type = cached_torch_device_type_privateuse1;" in lines[i]:
                    lines[i] = lines[i].replace("privateuse1;", "cpu;")
            for i in range(start, len(lines)):
                if isinstance(lines[i], str) and lines[i].strip() == "device_str,":
                    lines[i] = lines[i].replace("device_str,", '"cpu",')
                if isinstance(lines[i], str) and lines[i].rstrip().endswith(") {"):
                    lines[i + 1:i + 1] = [
                        "    device_type_ = aoti_torch_device_type_privateuse1();",
                        "    device_idx_ = std::max(openreg_aoti::device_index(device_str), 0);",
                    ]
                    break
    # ANCHOR_END: wrapper

    return OpenRegCppWrapper
