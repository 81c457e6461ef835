// mse_loss, smooth_l1_loss, huber_loss and binary_cross_entropy with their backwards. CPU's kernels are an
// elementwise stub plus a reduction; here the same steps are the device's own operators (sub,
// abs, where, mean or sum), each a Rust kernel, in CPU's formulas, so the losses never reach
// the CPU fallback.

#include "operators/Structured.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/any.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/log.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/where.h>
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

at::Tensor reduce(const at::Tensor& loss, int64_t reduction) {
  switch (reduction) {
    case at::Reduction::Mean: return at::mean(loss);
    case at::Reduction::Sum: return at::sum(loss);
    default: return loss;
  }
}

// `beta` (smooth L1) or `delta` (Huber): below it the loss is quadratic, above it linear.
at::Tensor elementwise_loss(bool huber, const at::Tensor& self, const at::Tensor& target, double bound) {
  const at::Tensor z = at::abs(at::sub(self, target));
  if (huber) {
    return at::where(z < bound, z * z * 0.5, (z - 0.5 * bound) * bound);
  }
  if (bound == 0.0) {
    return z;  // CPU's smooth L1 with beta 0 is the L1 loss
  }
  return at::where(z < bound, z * z * 0.5 / bound, z - 0.5 * bound);
}

at::Tensor smooth_l1(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  check_devices("smooth_l1_loss", {{"self", &self}, {"target", &target}});
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  return reduce(elementwise_loss(false, self, target, beta), reduction);
}

at::Tensor huber(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  check_devices("huber_loss", {{"self", &self}, {"target", &target}});
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return reduce(elementwise_loss(true, self, target, delta), reduction);
}

// The gradient: -1 below -bound, 1 above bound, linear between (scaled by 1/beta for smooth
// L1; Huber's linear parts have slope delta), times grad and 1/count for a mean.
at::Tensor linear_quadratic_backward(bool huber, const at::Tensor& grad, const at::Tensor& self,
                                     const at::Tensor& target, int64_t reduction, double bound) {
  const double norm = reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0;
  const at::Tensor x = at::sub(self, target);
  const at::Tensor g = grad * norm;
  const double slope = huber ? bound : 1.0;
  const at::Tensor middle = huber ? x * g : x * g / bound;
  return at::where(x <= -bound, g * -slope, at::where(x >= bound, g * slope, middle));
}

at::Tensor smooth_l1_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                              int64_t reduction, double beta) {
  check_devices("smooth_l1_loss_backward", {{"grad_output", &grad}, {"self", &self}, {"target", &target}});
  return linear_quadratic_backward(false, grad, self, target, reduction, beta);
}

at::Tensor huber_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                          int64_t reduction, double delta) {
  check_devices("huber_loss_backward", {{"grad_output", &grad}, {"self", &self}, {"target", &target}});
  return linear_quadratic_backward(true, grad, self, target, reduction, delta);
}

at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor& smooth_l1_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta,
                          at::Tensor& out) {
  return into(out, smooth_l1(self, target, reduction, beta));
}
at::Tensor& huber_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                      at::Tensor& out) {
  return into(out, huber(self, target, reduction, delta));
}
at::Tensor& smooth_l1_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta, at::Tensor& out) {
  return into(out, smooth_l1_backward(grad, self, target, reduction, beta));
}
at::Tensor& huber_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta, at::Tensor& out) {
  return into(out, huber_backward(grad, self, target, reduction, delta));
}

// Binary cross entropy, CPU's formula: the logarithms clamped at -100 so that a probability of
// exactly 0 or 1 gives a finite loss. CPU checks the input's values in its kernel; here that
// check reads one bool back from the device.
void check_probabilities(const at::Tensor& input) {
  TORCH_CHECK(!at::any(at::logical_or(input < 0, input > 1)).item<bool>(),
              "all elements of input should be between 0 and 1");
}

at::Tensor bce(const at::Tensor& input, const at::Tensor& target, const std::optional<at::Tensor>& weight,
               int64_t reduction) {
  check_devices("binary_cross_entropy", {{"self", &input}, {"target", &target}, {"weight", weight ? &*weight : nullptr}});
  check_probabilities(input);
  at::Tensor loss = (target - 1) * at::clamp_min(at::log1p(-input), -100) - target * at::clamp_min(at::log(input), -100);
  if (weight && weight->defined()) {
    loss = loss * *weight;
  }
  return reduce(loss, reduction);
}

at::Tensor& bce_out(const at::Tensor& input, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                    int64_t reduction, at::Tensor& out) {
  return into(out, bce(input, target, weight, reduction));
}

// d/dinput = grad (input - target) / max((1 - input) input, 1e-12), times the weight.
at::Tensor bce_backward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_devices("binary_cross_entropy_backward", {{"grad_output", &grad}, {"self", &input}, {"target", &target}});
  const double norm = reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(input.numel()) : 1.0;
  at::Tensor result = grad * norm * (input - target) / at::clamp_min((1 - input) * input, 1e-12);
  if (weight && weight->defined()) {
    result = result * *weight;
  }
  return result;
}

at::Tensor& bce_backward_out(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& out) {
  return into(out, bce_backward(grad, input, target, weight, reduction));
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
    library.impl("smooth_l1_loss", TORCH_FN(smooth_l1));
    library.impl("smooth_l1_loss.out", TORCH_FN(smooth_l1_out));
    library.impl("smooth_l1_loss_backward", TORCH_FN(smooth_l1_backward));
    library.impl("smooth_l1_loss_backward.grad_input", TORCH_FN(smooth_l1_backward_out));
    library.impl("huber_loss", TORCH_FN(huber));
    library.impl("huber_loss.out", TORCH_FN(huber_out));
    library.impl("huber_loss_backward", TORCH_FN(huber_backward));
    library.impl("huber_loss_backward.out", TORCH_FN(huber_backward_out));
    library.impl("binary_cross_entropy", TORCH_FN(bce));
    library.impl("binary_cross_entropy.out", TORCH_FN(bce_out));
    library.impl("binary_cross_entropy_backward", TORCH_FN(bce_backward));
    library.impl("binary_cross_entropy_backward.grad_input", TORCH_FN(bce_backward_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
