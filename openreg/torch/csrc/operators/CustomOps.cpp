// Operators of our own namespace, `openreg::`. The schema and the device kernel are
// registered here; the Meta ("fake") kernel and the autograd formula are registered from
// Python with torch.library (torch_openreg/openreg/custom_ops.py).

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: custom_abs
at::Tensor custom_abs(const at::Tensor& input) {
  TORCH_CHECK_TYPE(input.scalar_type() == at::kFloat,
                   "openreg::custom_abs supports float32 tensors, got ", input.scalar_type());
  const at::Tensor src = input.contiguous();
  at::Tensor out = at::empty_like(src);
  if (src.numel() > 0) {
    call([&] {
      launch_abs_f32(addr(out.data_ptr()), addr(src.const_data_ptr()), src.numel(),
                     src.device().index());
    });
  }
  return out;
}
// ANCHOR_END: custom_abs

} // namespace

// ANCHOR: register_custom
void register_custom_ops() {
  static torch::Library schemas(torch::Library::DEF, "openreg", std::nullopt, __FILE__, __LINE__);
  static torch::Library kernels(torch::Library::IMPL, "openreg", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    schemas.def("custom_abs(Tensor input) -> Tensor");
    kernels.impl("custom_abs", TORCH_FN(custom_abs));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_custom

} // namespace openreg
