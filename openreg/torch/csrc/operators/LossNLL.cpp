// The negative log-likelihood loss (the second half of cross_entropy), 1-D and spatial (2-D),
// with the Rust kernel in
// src/operators/kernels/nll_loss.rs. The structured metas check shapes and give the outputs; the kernel
// reads and checks the class indices on the stream (see `Targets` there).

#include "operators/Structured.h"

#include <ATen/core/Reduction.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <tuple>

namespace openreg {
namespace {

NllLoss arguments(const at::Tensor& self, int64_t reduction, const c10::SymInt& ignore_index) {
  return NllLoss{reduction, ignore_index.guard_int(__FILE__, __LINE__), self.size(-1),
                 reduction == at::Reduction::None && self.dim() == 2};
}

// An optional weight, contiguous (undefined when absent).
at::Tensor contiguous_weight(const std::optional<at::Tensor>& weight) {
  return weight && weight->defined() ? weight->contiguous() : at::Tensor();
}

at::OptionalTensorRef ref(const std::optional<at::Tensor>& weight) {
  return weight && weight->defined() ? at::OptionalTensorRef(*weight) : at::OptionalTensorRef();
}

// ANCHOR: nll_loss_forward
template <Variant kind>
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& self, const at::Tensor& target,
                                           const std::optional<at::Tensor>& weight,
                                           int64_t reduction, const c10::SymInt& ignore_index,
                                           const at::Tensor& output = {},
                                           const at::Tensor& total_weight = {}) {
  check_devices("wrapper_PrivateUse1_nll_loss_forward",
                {{"self", &self}, {"target", &target}, {"weight", weight ? &*weight : nullptr},
                 {"output", &output}, {"total_weight", &total_weight}});
  Structured<at::meta::structured_nll_loss_forward, kind> s(output, total_weight);
  s.meta(self, target, ref(weight), reduction,
         ignore_index.guard_int(__FILE__, __LINE__));
  const at::Tensor& out = s.maybe_get_output(0);
  const at::Tensor& total = s.maybe_get_output(1);
  const at::Tensor w = contiguous_weight(weight);
  const bool done = call([&] {
    return nll_loss_forward(arguments(self, reduction, ignore_index), dense(out), dense(total),
                            dense(self.contiguous()), dense(target.contiguous()), dense(w),
                            self.device().index());
  });
  if (!done) {
    on_host("nll_loss_forward", self.scalar_type(), [&] {
      at::Tensor host_out = host_alias(out), host_total = host_alias(total);
      at::nll_loss_forward_out(host_out, host_total, host_alias(self), host_alias(target),
                               w.defined() ? std::optional(host_alias(w)) : std::nullopt,
                               reduction, ignore_index.guard_int(__FILE__, __LINE__));
    });
  }
  return {s.result(0), s.result(1)};
}
// ANCHOR_END: nll_loss_forward

template <Variant kind>
at::Tensor backward(const at::Tensor& grad_output, const at::Tensor& self,
                    const at::Tensor& target, const std::optional<at::Tensor>& weight,
                    int64_t reduction, const c10::SymInt& ignore_index,
                    const at::Tensor& total_weight, const at::Tensor& given = {}) {
  check_devices("wrapper_PrivateUse1_nll_loss_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"target", &target},
                 {"weight", weight ? &*weight : nullptr}, {"total_weight", &total_weight},
                 {"grad_input", &given}});
  Structured<at::meta::structured_nll_loss_backward, kind> s(given);
  s.meta(grad_output, self, target, ref(weight), reduction,
         ignore_index.guard_int(__FILE__, __LINE__), total_weight);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  const at::Tensor w = contiguous_weight(weight);
  const bool done = call([&] {
    return nll_loss_backward(arguments(self, reduction, ignore_index), dense(grad_input),
                             dense(grad_output.contiguous()), dense(target.contiguous()),
                             dense(w), dense(total_weight.contiguous()), self.device().index());
  });
  if (!done) {
    on_host("nll_loss_backward", self.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::nll_loss_backward_out(host, host_alias(grad_output), host_alias(self),
                                host_alias(target),
                                w.defined() ? std::optional(host_alias(w)) : std::nullopt,
                                reduction, ignore_index.guard_int(__FILE__, __LINE__),
                                host_alias(total_weight));
    });
  }
  return s.result();
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward_functional(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index) {
  return forward<Variant::Functional>(self, target, weight, reduction, ignore_index);
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_output(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  forward<Variant::Out>(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

at::Tensor nll_loss_backward_functional(const at::Tensor& grad_output, const at::Tensor& self,
                                        const at::Tensor& target,
                                        const std::optional<at::Tensor>& weight,
                                        int64_t reduction, c10::SymInt ignore_index,
                                        const at::Tensor& total_weight) {
  return backward<Variant::Functional>(grad_output, self, target, weight, reduction,
                                       ignore_index, total_weight);
}

at::Tensor& nll_loss_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight,
                                         int64_t reduction, c10::SymInt ignore_index,
                                         const at::Tensor& total_weight,
                                         at::Tensor& grad_input) {
  backward<Variant::Out>(grad_output, self, target, weight, reduction, ignore_index,
                         total_weight, grad_input);
  return grad_input;
}

// ANCHOR: nll_loss2d
// nll_loss2d: each spatial position is a row of the 1-D loss ([N, C, H, W] becomes
// [N*H*W, C]), so the kernels above serve it. CPU's checks (LossNLL2d.cpp) come first.
void check_2d(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(!weight || !weight->defined() || weight->numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
}

at::Tensor rows_of(const at::Tensor& self) {
  return self.movedim(1, -1).reshape({-1, self.size(1)});
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward_functional(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index) {
  check_2d(self, target, weight);
  auto [out, total] = forward<Variant::Functional>(rows_of(self), target.reshape({-1}), weight, reduction, ignore_index);
  return {reduction == at::Reduction::None ? out.reshape(target.sizes()) : out, total};
}

at::Tensor nll_loss2d_backward_functional(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                          int64_t reduction, c10::SymInt ignore_index,
                                          const at::Tensor& total_weight) {
  check_2d(self, target, weight);
  const at::Tensor grad = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
  const at::Tensor rows = backward<Variant::Functional>(grad, rows_of(self), target.reshape({-1}), weight,
                                                        reduction, ignore_index, total_weight);
  // [N*H*W, C] back to [N, C, H, W], contiguous as CPU's.
  return rows.reshape({self.size(0), self.size(2), self.size(3), self.size(1)}).movedim(-1, 1).contiguous();
}
// ANCHOR_END: nll_loss2d

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_output(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  auto [out, total] = nll_loss2d_forward_functional(self, target, weight, reduction, std::move(ignore_index));
  at::native::resize_output(output, out.sizes());
  at::native::resize_output(total_weight, total.sizes());
  output.copy_(out);
  total_weight.copy_(total);
  return {output, total_weight};
}

at::Tensor& nll_loss2d_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                           int64_t reduction, c10::SymInt ignore_index,
                                           const at::Tensor& total_weight, at::Tensor& grad_input) {
  const at::Tensor result = nll_loss2d_backward_functional(grad_output, self, target, weight, reduction,
                                                           std::move(ignore_index), total_weight);
  at::native::resize_output(grad_input, result.sizes());
  return grad_input.copy_(result);
}

} // namespace

void register_nll_loss() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("nll_loss_forward", TORCH_FN(nll_loss_forward_functional));
    library.impl("nll_loss_forward.output", TORCH_FN(nll_loss_forward_output));
    library.impl("nll_loss_backward", TORCH_FN(nll_loss_backward_functional));
    library.impl("nll_loss_backward.grad_input", TORCH_FN(nll_loss_backward_grad_input));
    library.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward_functional));
    library.impl("nll_loss2d_forward.output", TORCH_FN(nll_loss2d_forward_output));
    library.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward_functional));
    library.impl("nll_loss2d_backward.grad_input", TORCH_FN(nll_loss2d_backward_grad_input));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
