// Activations that are not one elementwise formula with one output: log_sigmoid's forward
// (an output and a buffer), GLU (two halves of the input) and PReLU's kernels (a broadcast
// weight, two gradients). log_sigmoid computes with the Rust kernel; GLU and PReLU are
// composed of device operators, in CPU's formulas.

#include "operators/Structured.h"

#include <ATen/TensorOperators.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorIterator.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/glu.h>
#include <ATen/ops/log_sigmoid_forward.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: log_sigmoid
// The buffer is CPU's cache of exp(-|x|) for the backward. Our backward recomputes it, but
// PyTorch's fake implementation promises the full buffer on every device but CUDA and XPU
// (torch/_decomp/decompositions.py, log_sigmoid_forward), and compiled code trusts that
// promise: so the buffer is made, as CPU makes it.
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                              at::Tensor& buffer) {
  check_devices("log_sigmoid_forward_out", {{"self", &self}, {"output", &output}, {"buffer", &buffer}});
  // CPU's log_sigmoid_forward_out_cpu makes no overlap check: neither does this iterator.
  at::native::resize_output(output, self.sizes());
  at::TensorIterator iter = at::TensorIteratorConfig().set_check_mem_overlap(false).add_output(output)
                                .add_const_input(self).build();
  if (run_pointwise(iter, Pointwise::LogSigmoid)) {
    at::native::resize_output(buffer, self.sizes());
    at::exp_out(buffer, at::neg(at::abs(self)));
    return {output, buffer};
  }
  // A dtype the formula does not compute in: CPU's kernel.
  on_host("log_sigmoid_forward", self.scalar_type(), [&] {
    at::Tensor host_buffer = at::empty({0}, self.options().device(at::kCPU));
    at::Tensor host_output = host_alias(iter.output(0));
    at::log_sigmoid_forward_out(host_output, host_buffer, host_alias(self));
    at::native::resize_output(buffer, host_buffer.sizes());
    buffer.copy_(host_buffer);
  });
  return {output, buffer};
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor output = at::empty({0}, self.options()), buffer = at::empty({0}, self.options());
  log_sigmoid_forward_out(self, output, buffer);
  return {output, buffer};
}
// ANCHOR_END: log_sigmoid

// GLU: the first half times the sigmoid of the second, along `dim` (CPU's checks).
std::pair<at::Tensor, at::Tensor> halves(const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t size = self.size(d);
  TORCH_CHECK(size % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", size);
  return {self.narrow(d, 0, size / 2), self.narrow(d, size / 2, size / 2)};
}

at::Tensor& glu_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const auto [a, b] = halves(self, dim);
  at::Tensor result = a * at::sigmoid(b);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor glu(const at::Tensor& self, int64_t dim) {
  const auto [a, b] = halves(self, dim);
  return a * at::sigmoid(b);
}

// d/da = grad * sigmoid(b); d/db = grad * a * sigmoid(b) * (1 - sigmoid(b)).
at::Tensor& glu_backward_out(const at::Tensor& grad, const at::Tensor& self, int64_t dim, at::Tensor& grad_input) {
  const auto [a, b] = halves(self, dim);
  const at::Tensor s = at::sigmoid(b);
  const at::Tensor result = at::cat({grad * s, grad * a * s * (1 - s)}, at::maybe_wrap_dim(dim, self.dim()));
  at::native::resize_output(grad_input, self.sizes());
  return grad_input.copy_(result);
}

at::Tensor glu_backward(const at::Tensor& grad, const at::Tensor& self, int64_t dim) {
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  return glu_backward_out(grad, self, dim, grad_input);
}

// PReLU's kernels take a weight already shaped to broadcast; both gradients have the
// broadcast shape (autograd sums the weight's).
at::Tensor prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  return at::where(self > 0, self, weight * self);
}

std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(const at::Tensor& grad, const at::Tensor& self,
                                                          const at::Tensor& weight) {
  const at::Tensor positive = self > 0;
  return {at::where(positive, grad, weight * grad), at::where(positive, at::zeros_like(grad), self * grad)};
}

} // namespace

void register_activations() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
    library.impl("log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
    library.impl("glu", TORCH_FN(glu));
    library.impl("glu.out", TORCH_FN(glu_out));
    library.impl("glu_backward", TORCH_FN(glu_backward));
    library.impl("glu_backward.grad_input", TORCH_FN(glu_backward_out));
    library.impl("_prelu_kernel", TORCH_FN(prelu_kernel));
    library.impl("_prelu_kernel_backward", TORCH_FN(prelu_kernel_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
