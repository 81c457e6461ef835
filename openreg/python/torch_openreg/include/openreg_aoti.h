// What a model compiled by AOTInductor for openreg calls in the backend.
//
// The generated C++ (torch_openreg/openreg/_aoti.py writes it) includes this text. A model is a
// shared library loaded after the backend, by torch_openreg._C in Python or by
// libtorch_openreg.so in a C++ program, so it reaches the backend through one exported symbol,
// openreg_aoti_shim(): a table of C functions. Inductor names a device's extern operators
// aoti_torch_<device>_<op> (its "C shim"); the inline functions below are those names, and
// they turn a failure into the C++ exception the model's runtime reports.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

extern "C" {

// ANCHOR: table
// One argument of a compiled kernel: a tensor (its memory is translated to the runtime's
// view), or an int64 size when `tensor` is null.
struct OpenRegKernelArg {
  AtenTensorHandle tensor;
  int64_t value;
};

// A compiled kernel's entry point: its arguments as an array; never throws, returns 0 or
// the class of the failure with its message (see exception_barrier in _inductor.py).
typedef int (*OpenRegKernelEntry)(const uint64_t* args, char** message);

struct OpenRegAOTIShim {
  // Bumped when a field changes: a model compiled against another layout refuses to run.
  int64_t version;
  AOTITorchError (*launch)(OpenRegKernelEntry kernel, const OpenRegKernelArg* args, int64_t count);
  AOTITorchError (*addmm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1,
                              AtenTensorHandle mat2, double beta, double alpha);
  AOTITorchError (*mm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2);
  AOTITorchError (*bmm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2);
  AOTITorchError (*baddbmm_out)(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle batch1,
                                AtenTensorHandle batch2, double beta, double alpha);
  AOTITorchError (*convolution)(AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias,
                                const int64_t* stride, int64_t stride_len, const int64_t* padding,
                                int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
                                int32_t transposed, const int64_t* output_padding,
                                int64_t output_padding_len, int64_t groups, AtenTensorHandle* ret0);
  AOTITorchError (*sdpa_overrideable)(AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
                                      AtenTensorHandle* attn_bias, double dropout_p, int32_t is_causal,
                                      int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0,
                                      AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3,
                                      int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6,
                                      AtenTensorHandle* ret7, AtenTensorHandle* ret8);
};

#define OPENREG_AOTI_SHIM_VERSION 1

const OpenRegAOTIShim* openreg_aoti_shim();
// ANCHOR_END: table
}

#ifndef OPENREG_AOTI_BACKEND
namespace openreg_aoti {

inline const OpenRegAOTIShim& shim() {
  static const OpenRegAOTIShim* table = [] {
    const OpenRegAOTIShim* t = openreg_aoti_shim();
    if (t == nullptr || t->version != OPENREG_AOTI_SHIM_VERSION) {
      throw std::runtime_error("this model was compiled for another version of torch_openreg's "
                               "AOTInductor interface; compile it again with the installed one");
    }
    return t;
  }();
  return *table;
}

// ANCHOR: check
// The shim keeps the failure's message where torch's own shims keep theirs.
inline AOTITorchError check(AOTITorchError error) {
  if (error != AOTI_TORCH_SUCCESS) {
    throw std::runtime_error(torch_exception_get_what_without_backtrace());
  }
  return error;
}
// ANCHOR_END: check

// "openreg" or "openreg:1" to the device index (-1: the current device).
inline int32_t device_index(const std::string& device) {
  if (device.rfind("openreg", 0) != 0 || (device.size() > 7 && device[7] != ':')) {
    throw std::runtime_error("an openreg model cannot run on device '" + device + "'");
  }
  return device.size() > 8 ? std::stoi(device.substr(8)) : -1;
}

// ANCHOR: on_device
// The device copy of a weight. torch's runtime loads a model's weights from its library into
// host memory (aoti_runtime/model_base.h allocates device memory only for CUDA, XPU and
// MPS), so our models record them as CPU constants. The first run copies each one to the
// device, the whole storage so that the generated views' offsets still hold, and keeps the
// copy in the model's constant map, which owns it from then on. A weight replaced by
// update_constant_buffer has a new host address, hence a new copy.
template <typename ConstantMap>
AtenTensorHandle on_device(ConstantMap& constants, const std::string& name, AtenTensorHandle host,
                           int32_t device_index) {
  static std::mutex mutex;
  void* data = nullptr;
  check(aoti_torch_get_data_ptr(host, &data));
  std::string key = name + "@openreg:" + std::to_string(device_index) + ":" +
                    std::to_string(reinterpret_cast<uintptr_t>(data));
  std::lock_guard<std::mutex> lock(mutex);
  auto found = constants.find(key);
  if (found != constants.end()) return found->second.get();

  int32_t dtype = 0;
  int64_t bytes = 0, offset = 0, ndim = 0;
  int64_t *sizes = nullptr, *strides = nullptr;
  check(aoti_torch_get_dtype(host, &dtype));
  check(aoti_torch_get_storage_size(host, &bytes));
  check(aoti_torch_get_storage_offset(host, &offset));
  check(aoti_torch_get_dim(host, &ndim));
  check(aoti_torch_get_sizes(host, &sizes));
  check(aoti_torch_get_strides(host, &strides));
  int64_t elements = bytes / aoti_torch_dtype_element_size(dtype);
  const int64_t one = 1;
  AtenTensorHandle host_storage = nullptr, device_storage = nullptr, device = nullptr;
  check(aoti_torch__reinterpret_tensor(host, 1, &elements, &one, 0, &host_storage));
  check(aoti_torch_empty_strided(1, &elements, &one, dtype, aoti_torch_device_type_privateuse1(),
                                 device_index, &device_storage));
  check(aoti_torch_copy_(device_storage, host_storage, 0));
  check(aoti_torch__reinterpret_tensor(device_storage, ndim, sizes, strides, offset, &device));
  check(aoti_torch_delete_tensor_object(host_storage));
  check(aoti_torch_delete_tensor_object(device_storage));
  return constants.emplace(key, device).first->second.get();
}
// ANCHOR_END: on_device

} // namespace openreg_aoti

// ANCHOR: addmm
inline AOTITorchError aoti_torch_openreg_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                   AtenTensorHandle mat1, AtenTensorHandle mat2,
                                                   double beta, double alpha) {
  return openreg_aoti::check(openreg_aoti::shim().addmm_out(out, self, mat1, mat2, beta, alpha));
}
// ANCHOR_END: addmm
inline AOTITorchError aoti_torch_openreg_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                AtenTensorHandle mat2) {
  return openreg_aoti::check(openreg_aoti::shim().mm_out(out, self, mat2));
}
inline AOTITorchError aoti_torch_openreg_bmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                 AtenTensorHandle mat2) {
  return openreg_aoti::check(openreg_aoti::shim().bmm_out(out, self, mat2));
}
inline AOTITorchError aoti_torch_openreg_baddbmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                     AtenTensorHandle batch1, AtenTensorHandle batch2,
                                                     double beta, double alpha) {
  return openreg_aoti::check(openreg_aoti::shim().baddbmm_out(out, self, batch1, batch2, beta, alpha));
}
inline AOTITorchError aoti_torch_openreg_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride,
    int64_t stride_len, const int64_t* padding, int64_t padding_len, const int64_t* dilation,
    int64_t dilation_len, int32_t transposed, const int64_t* output_padding,
    int64_t output_padding_len, int64_t groups, AtenTensorHandle* ret0) {
  return openreg_aoti::check(openreg_aoti::shim().convolution(
      input, weight, bias, stride, stride_len, padding, padding_len, dilation, dilation_len,
      transposed, output_padding, output_padding_len, groups, ret0));
}
inline AOTITorchError aoti_torch_openreg__scaled_dot_product_fused_attention_overrideable(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_bias,
    double dropout_p, int32_t is_causal, int32_t return_debug_mask, double* scale,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3,
    int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6, AtenTensorHandle* ret7,
    AtenTensorHandle* ret8) {
  return openreg_aoti::check(openreg_aoti::shim().sdpa_overrideable(
      query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, scale, ret0, ret1,
      ret2, ret3, ret4, ret5, ret6, ret7, ret8));
}

// ANCHOR: launch
// A compiled kernel, run on the current stream of its tensors' device.
template <size_t N>
inline void openreg_launch(OpenRegKernelEntry kernel, const OpenRegKernelArg (&args)[N]) {
  openreg_aoti::check(openreg_aoti::shim().launch(kernel, args, static_cast<int64_t>(N)));
}
// ANCHOR_END: launch
#endif
