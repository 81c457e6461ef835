// Random operators whose schema has no Generator argument. Through the CPU fallback their
// CPU kernel would draw from the *CPU's* default generator, so seeding torch.openreg would
// not make them reproducible: they draw from this device's generator instead.

#include "operators/Structured.h"
#include "runtime/Generator.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: native_dropout
// Dropout's mask and output in one Rust kernel (float32, float16, bfloat16); its random
// numbers come from one 64-bit draw of this device's generator per call. Other dtypes: the
// CPU kernel's composition, with the mask drawn by bernoulli_, which the fallback runs with
// this device's generator.
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
  const at::Tensor x = input.contiguous();
  at::Tensor output = at::empty_like(x, at::MemoryFormat::Contiguous);
  at::Tensor mask = at::empty_like(x, bool_options, at::MemoryFormat::Contiguous);
  const bool done = call([&] {
    return launch_dropout(false, draw_seed(x.device().index()), keep, 1.0 / keep, dense(output),
                          dense(x), dense(mask), x.device().index());
  });
  if (done) {
    return {output, mask};
  }
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(1.0 / keep), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  check_devices("native_dropout_backward", {{"grad_output", &grad}, {"mask", &mask}});
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == grad.sizes(),
              "native_dropout_backward: expected a bool mask of the gradient's size ",
              grad.sizes(), ", got ", mask.scalar_type(), " of size ", mask.sizes());
  const at::Tensor g = grad.contiguous(), m = mask.contiguous();
  at::Tensor out = at::empty_like(g, at::MemoryFormat::Contiguous);
  const bool done = call([&] {
    return launch_dropout(true, 0, 1.0, scale, dense(out), dense(g), dense(m),
                          g.device().index());
  });
  return done ? out : grad.mul(mask).mul(scale);  // CPU's formula and its types (bool * double is float)
}
// ANCHOR_END: native_dropout

} // namespace

void register_random_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("native_dropout", TORCH_FN(native_dropout));
    library.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
