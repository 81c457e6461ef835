// Random operators whose schema has no Generator argument. Through the CPU fallback their
// CPU kernel would draw from the *CPU's* default generator, so seeding torch.openreg would
// not make them reproducible. Composing them from operators that take a generator fixes that.

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: native_dropout
// Dropout's kernel (the CPU one, in effect) with the mask drawn by bernoulli_, which the
// fallback runs with this device's generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const auto bool_options = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, bool_options)};
  }
  if (p == 1.0) {
    return {at::zeros_like(input), at::zeros_like(input, bool_options)};
  }
  const double keep = 1.0 - p;
  at::Tensor mask = at::empty_like(input, bool_options).bernoulli_(keep);
  at::Tensor output = input.mul(mask).mul_(1.0 / keep);
  return {output, mask};
}
// ANCHOR_END: native_dropout

} // namespace

void register_random_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("native_dropout", TORCH_FN(native_dropout));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
