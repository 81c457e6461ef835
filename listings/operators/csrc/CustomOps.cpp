// An operator of our own, openreg::custom_abs: its schema and device kernel from C++; its
// Meta kernel and autograd formula from Python (torch_openreg/custom_ops.py).

#include "OpenReg.h"

#include <ATen/ops/empty_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: custom_abs
at::Tensor custom_abs(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat, "openreg::custom_abs expects float32, got ",
              self.scalar_type());
  at::Tensor input = self.contiguous();
  at::Tensor out = at::empty_like(input);
  const std::array<size_t, 2> data{reinterpret_cast<size_t>(out.data_ptr()),
                                   reinterpret_cast<size_t>(input.data_ptr())};
  const int64_t shape = input.numel(), strides[] = {4, 4};  // contiguous float32
  call([&] { abs_f32({data.data(), 2}, {&shape, 1}, {strides, 2}); });
  return out;
}
// ANCHOR_END: custom_abs

} // namespace

// ANCHOR: register_custom
void register_custom_ops() {
  static torch::Library def(torch::Library::DEF, "openreg", std::nullopt, __FILE__, __LINE__);
  static torch::Library impl(torch::Library::IMPL, "openreg", c10::DispatchKey::PrivateUse1,
                             __FILE__, __LINE__);
  static bool registered = [] {
    def.def("custom_abs(Tensor self) -> Tensor");
    impl.impl("custom_abs", TORCH_FN(custom_abs));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_custom

} // namespace openreg
