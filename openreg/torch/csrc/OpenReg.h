#pragma once
// Shared by the glue's translation units: the Rust functions (ffi.rs.h) and the pieces each
// file provides to the others.

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

namespace at {
struct HostAllocator;
class Tensor;
} // namespace at

#include "openreg-torch/src/ffi.rs.h"
#include "rust/cxx.h"

namespace openreg {

constexpr auto kOpenReg = c10::DeviceType::PrivateUse1;

// ANCHOR: call
// Throws the c10 exception matching a failed Rust call: c10::OutOfMemoryError,
// c10::ValueError, c10::IndexError or c10::AcceleratorError, which Python sees as
// torch.OutOfMemoryError, ValueError, IndexError and torch.AcceleratorError (a RuntimeError).
[[noreturn]] void throw_error(const rust::Error& error);

// Calls into Rust, turning its error into the matching c10 (and so Python) exception.
template <typename F>
decltype(auto) call(F&& f) {
  try {
    return f();
  } catch (const rust::Error& error) {
    throw_error(error);
  }
}
// ANCHOR_END: call

inline size_t addr(const void* ptr) {
  return reinterpret_cast<size_t>(ptr);
}

// DeviceAllocator.cpp
c10::DeviceAllocator* device_allocator();
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);
// Minimal.cpp: a CPU tensor over the same bytes (through the runtime's view for device
// tensors, after waiting for the current stream).
at::Tensor host_alias(const at::Tensor& t);
// SoftMax.cpp: softmax over the last dimension of contiguous float32 `scores`, writing each
// row's log-sum-exp (max + log(sum(exp))) into `lse` on the way (attention's forward).
at::Tensor softmax_with_lse(const at::Tensor& scores, const at::Tensor& lse);
// HostAllocator.cpp
at::HostAllocator* host_allocator();
// Guard.cpp, Hooks.cpp, Minimal.cpp, Fallback.cpp
void register_guard();
void register_aoti_runner();
void register_hooks();
void register_minimal_ops();
void register_shallow_copy();
void register_stream_ops();
void register_random_ops();
void register_custom_ops();
void register_autograd_ops();
void register_stubs();
void register_pointwise_ops();
void register_table_ops();
void register_linalg();
void register_indexing();
void register_upsample();
void register_weight_norm();
void register_torchvision_ops();
void register_sorting();
void register_summary_ops();
void register_reductions();
void register_matmul();
void register_softmax();
void register_nll_loss();
void register_convolution();
void register_rnn_cells();
void register_lstm();
void register_normalization();
void register_pooling();
void register_padding();
void register_margin_losses();
void register_ctc_loss();
void register_compound_pointwise();
void register_losses();
void register_optimizers();
void register_embedding();
void register_tensor_shape();
void register_triangular_ops();
void register_range_factories();
void register_gather();
void register_tensor_compare();
void register_activations();
void register_autocast();
void register_attention();
void register_quantized_ops();
void register_codegen_ops();
void register_fallback();
void register_serialization();
void register_profiler();
void register_activity_profiler();
void register_graph();
// DeviceAllocator.cpp: PYTORCH_ALLOC_CONF
void register_allocator_config();

} // namespace openreg
