#include "Register.h"

#include "OpenReg.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/DeviceType.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace openreg {

void register_all();

// ANCHOR: register_backend
// Called once from the Python module's init. Registering explicitly (instead of with static
// registrars such as TORCH_LIBRARY_IMPL) means a linker cannot drop a registration, and a
// failure becomes a Python exception at import. Each step is idempotent.
void register_backend() {
  try {
    register_all();
  } catch (const c10::Error& e) {
    // The message alone: the ImportError should not carry a C++ backtrace.
    throw std::runtime_error(e.what_without_backtrace());
  }
}

void register_all() {
  // The device's name in strings ("openreg:0"); Python's torch.utils.rename_privateuse1_backend
  // does the same. Here so that a C++ program (libtorch_openreg.so) gets it too.
  c10::register_privateuse1_backend("openreg");
  register_allocator_config();
  c10::SetAllocator(kOpenReg, device_allocator());
  at::setHostAllocator(kOpenReg, host_allocator());
  register_guard();
  register_hooks();
  register_minimal_ops();
  register_shallow_copy();
  register_stream_ops();
  register_random_ops();
  register_custom_ops();
  register_autograd_ops();
  register_stubs();
  // OPENREG_NATIVE_KERNELS=0 leaves these operators to the fallback (to measure what the
  // Rust kernels buy).
  const char* native = std::getenv("OPENREG_NATIVE_KERNELS");
  if (native == nullptr || std::string(native) != "0") {
    register_pointwise_ops();
    register_table_ops();
    register_linalg();
    register_indexing();
    register_sorting();
    register_summary_ops();
    register_reductions();
    register_matmul();
    register_softmax();
    register_nll_loss();
    register_normalization();
    register_pooling();
    register_upsample();
    register_weight_norm();
    register_torchvision_ops();
    register_padding();
    register_compound_pointwise();
    register_losses();
    register_margin_losses();
    register_ctc_loss();
    register_optimizers();
    register_embedding();
    register_lstm();
    register_tensor_shape();
    register_triangular_ops();
    register_range_factories();
    register_gather();
    register_tensor_compare();
    register_activations();
    register_codegen_ops();
  }
  // No CPU kernel exists for these, so the fallback could not run them.
  register_convolution();
  register_rnn_cells();
  register_attention();
  register_quantized_ops();
  register_autocast();
  register_fallback();
  register_serialization();
  register_profiler();
  register_activity_profiler();
  register_graph();
  register_aoti_runner();
}
// ANCHOR_END: register_backend

} // namespace openreg
