// mse_loss and its backward. CPU's kernels are an elementwise stub plus a reduction; here the
// same steps are the device's own operators (sub, mul, mean or sum), each a Rust kernel, so
// the loss never reaches the CPU fallback.

#include "operators/Structured.h"

#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: mse_loss
at::Tensor mse(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  check_devices("mse_loss", {{"self", &self}, {"target", &target}});
  TORCH_CHECK(reduction >= at::Reduction::None && reduction <= at::Reduction::Sum,
              "mse_loss: reduction must be 0 (none), 1 (mean) or 2 (sum), got ", reduction);
  at::Tensor squares = at::sub(self, target);  // broadcasting and type promotion as CPU's
  squares.mul_(squares);
  switch (reduction) {
    case at::Reduction::Mean: return at::mean(squares);
    case at::Reduction::Sum: return at::sum(squares);
    default: return squares;
  }
}
// ANCHOR_END: mse_loss

at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                         at::Tensor& out) {
  const at::Tensor result = mse(self, target, reduction);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

// d/dself of the loss: 2 (self - target) grad, divided by the count for a mean.
at::Tensor mse_backward(const at::Tensor& grad, const at::Tensor& self,
                             const at::Tensor& target, int64_t reduction) {
  check_devices("mse_loss_backward", {{"grad_output", &grad}, {"self", &self}, {"target", &target}});
  const double norm = reduction == at::Reduction::Mean ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  at::Tensor grad_input = at::sub(self, target);
  grad_input.mul_(grad);
  return grad_input.mul_(norm);
}

at::Tensor& mse_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                  const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  const at::Tensor result = mse_backward(grad, self, target, reduction);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

} // namespace

void register_losses() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("mse_loss", TORCH_FN(mse));
    library.impl("mse_loss.out", TORCH_FN(mse_loss_out));
    library.impl("mse_loss_backward", TORCH_FN(mse_backward));
    library.impl("mse_loss_backward.grad_input", TORCH_FN(mse_loss_backward_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
