// AOTInductor: what a packaged model (a .pt2 compiled by torch._inductor.aoti_compile_and_package)
// needs from the backend. Two parts:
//  - the C shim the generated C++ calls (openreg_aoti.h): kernel launches on the current stream,
//    and the extern operators Inductor does not generate (matmuls, convolution, attention),
//    which go to our kernels through the dispatcher;
//  - the model runner torch's package loader creates for the device, registered with
//    RegisterAOTIModelRunner, which moves the model's weights onto the device.

#define OPENREG_AOTI_BACKEND
#include <openreg_aoti.h>

#include "OpenReg.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <string>
#include <vector>

// The Rust side of a launch (openreg/torch/src/high_level/compiled.rs).
extern "C" {
struct OpenRegLaunchArg {
  uint8_t is_tensor;
  uint64_t value;
  uint64_t base;
  uint64_t bytes;
};
int32_t openreg_launch_compiled(uint64_t kernel, const OpenRegLaunchArg* args, size_t count,
                                char* message, size_t message_len);
}

namespace openreg {
namespace {

using torch::aot_inductor::new_tensor_handle;
using torch::aot_inductor::pointer_to_list;
using torch::aot_inductor::pointer_to_optional;
using torch::aot_inductor::tensor_handle_to_tensor_pointer;

const at::Tensor& tensor(AtenTensorHandle handle) {
  return *tensor_handle_to_tensor_pointer(handle);
}

// ANCHOR: launch
// The memory a kernel may touch is the tensor's whole storage: Inductor indexes from the
// data pointer and may reach back to the storage's start for a view.
AOTITorchError launch(OpenRegKernelEntry kernel, const OpenRegKernelArg* args, int64_t count) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    std::vector<OpenRegLaunchArg> translated(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      if (args[i].tensor == nullptr) {
        translated[i] = {0, static_cast<uint64_t>(args[i].value), 0, 0};
        continue;
      }
      const at::Tensor& t = tensor(args[i].tensor);
      const c10::Storage& storage = t.storage();
      translated[i] = {1, reinterpret_cast<uint64_t>(t.data_ptr()),
                       reinterpret_cast<uint64_t>(storage.data()), storage.nbytes()};
    }
    char message[1024] = {0};
    int32_t code = openreg_launch_compiled(reinterpret_cast<uint64_t>(kernel), translated.data(),
                                           translated.size(), message, sizeof(message));
    TORCH_CHECK_INDEX(code != 2, message);
    TORCH_CHECK(code == 0, message);
  });
}
// ANCHOR_END: launch

// ANCHOR: extern_ops
AOTITorchError addmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1,
                         AtenTensorHandle mat2, double beta, double alpha) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor result = tensor(out);
    at::addmm_out(result, tensor(self), tensor(mat1), tensor(mat2), beta, alpha);
  });
}

AOTITorchError mm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor result = tensor(out);
    at::mm_out(result, tensor(self), tensor(mat2));
  });
}
// ANCHOR_END: extern_ops

AOTITorchError bmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor result = tensor(out);
    at::bmm_out(result, tensor(self), tensor(mat2));
  });
}

AOTITorchError baddbmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle batch1,
                           AtenTensorHandle batch2, double beta, double alpha) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor result = tensor(out);
    at::baddbmm_out(result, tensor(self), tensor(batch1), tensor(batch2), beta, alpha);
  });
}

AOTITorchError convolution(AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias,
                           const int64_t* stride, int64_t stride_len, const int64_t* padding,
                           int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
                           int32_t transposed, const int64_t* output_padding,
                           int64_t output_padding_len, int64_t groups, AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor result = at::convolution(
        tensor(input), tensor(weight), pointer_to_optional<at::Tensor>(bias),
        pointer_to_list<int64_t>(stride, stride_len), pointer_to_list<int64_t>(padding, padding_len),
        pointer_to_list<int64_t>(dilation, dilation_len), transposed != 0,
        pointer_to_list<int64_t>(output_padding, output_padding_len), groups);
    *ret0 = new_tensor_handle(std::move(result));
  });
}

AOTITorchError sdpa_overrideable(AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
                                 AtenTensorHandle* attn_bias, double dropout_p, int32_t is_causal,
                                 int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0,
                                 AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3,
                                 int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6,
                                 AtenTensorHandle* ret7, AtenTensorHandle* ret8) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    auto [out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug] =
        at::_scaled_dot_product_fused_attention_overrideable(
            tensor(query), tensor(key), tensor(value), pointer_to_optional<at::Tensor>(attn_bias),
            dropout_p, is_causal != 0, return_debug_mask != 0, pointer_to_optional<double>(scale));
    // Inductor passes null for the outputs the graph does not use.
    AtenTensorHandle* handles[] = {ret0, ret1, ret2, ret3, ret6, ret7, ret8};
    at::Tensor* tensors[] = {&out, &lse, &cum_q, &cum_k, &seed, &offset, &debug};
    for (size_t i = 0; i < 7; ++i) {
      if (handles[i] != nullptr) *handles[i] = new_tensor_handle(std::move(*tensors[i]));
    }
    if (ret4 != nullptr) *ret4 = max_q.guard_int(__FILE__, __LINE__);
    if (ret5 != nullptr) *ret5 = max_k.guard_int(__FILE__, __LINE__);
  });
}

const OpenRegAOTIShim kShim = {
    OPENREG_AOTI_SHIM_VERSION, launch, addmm_out, mm_out, bmm_out, baddbmm_out, convolution,
    sdpa_overrideable,
};

// ANCHOR: runner
// The runner torch's package loader creates for a model whose device is "openreg". The base
// class loads the model's library and runs it; the device-specific work (weights on the
// device, kernels on the current stream) is in the generated code and the shim above. The
// constructor is protected: a device's runner is a subclass.
class OpenRegModelRunner : public torch::inductor::AOTIModelContainerRunner {
 public:
  OpenRegModelRunner(const std::string& model_so_path, size_t num_models, const std::string& device_str,
                     const std::string& bin_dir, bool run_single_threaded)
      : AOTIModelContainerRunner(model_so_path, num_models, checked(device_str), bin_dir,
                                 run_single_threaded) {}

 private:
  static const std::string& checked(const std::string& device_str) {
    c10::Device device(device_str);
    TORCH_CHECK_VALUE(device.type() == kOpenReg, "an openreg model cannot run on ", device_str);
    if (device.has_index()) {
      auto count = c10::impl::getDeviceGuardImpl(kOpenReg)->deviceCount();
      TORCH_CHECK_VALUE(device.index() < count, "an openreg model cannot run on ", device_str,
                        ": there are ", static_cast<int>(count), " openreg devices");
    }
    return device_str;
  }
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(
    const std::string& model_so_path, size_t num_models, const std::string& device_str,
    const std::string& bin_dir, const bool run_single_threaded) {
  return std::make_unique<OpenRegModelRunner>(model_so_path, num_models, device_str, bin_dir,
                                              run_single_threaded);
}
// ANCHOR_END: runner

} // namespace

void register_aoti_runner() {
  static torch::inductor::RegisterAOTIModelRunner registration("openreg", create_runner);
}

} // namespace openreg

// The table's address, exported by the Rust crate as openreg_aoti_shim (a C++ symbol in a
// Rust library is not exported).
extern "C" const OpenRegAOTIShim* openreg_aoti_shim_table() {
  return &openreg::kShim;
}
