// The multi-class margin losses (nn.MultiMarginLoss, nn.MultiLabelMarginLoss) with the Rust
// kernels in src/operators/kernels/margin.rs. Neither operator is structured: the shapes are
// checked with CPU's shared checks (ATen/native/LossMulti.h) and sized as CPU sizes them. The
// kernels read and check the targets' values on the stream (CPU's messages), as the NLL loss does.

#include "operators/Structured.h"

#include <ATen/core/Reduction.h>
#include <ATen/native/LossMulti.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/multi_margin_loss.h>
#include <ATen/ops/multi_margin_loss_backward.h>
#include <ATen/ops/multilabel_margin_loss_backward.h>
#include <ATen/ops/multilabel_margin_loss_forward.h>
#include <torch/library.h>

namespace openreg {
namespace {

LossArgs margin_args(int64_t classes, int64_t reduction, int64_t p, double margin) {
  LossArgs a{};
  a.classes = classes;
  a.reduction = reduction;
  a.p = p;
  a.margin = margin;
  return a;
}

// Runs `op` over contiguous copies of `operands` (outputs first, written back if they are not
// contiguous). False: a dtype the kernel lacks.
bool run(Loss op, const LossArgs& args, std::initializer_list<at::Tensor> outputs,
         std::initializer_list<at::Tensor> inputs) {
  std::vector<at::Tensor> keep;
  std::vector<Dense> slots;
  for (const at::Tensor& t : outputs) {
    keep.push_back(t.is_contiguous() ? t : at::empty(t.sizes(), t.options()));
    slots.push_back(dense(keep.back()));
  }
  for (const at::Tensor& t : inputs) {
    keep.push_back(t.defined() ? t.contiguous() : t);
    slots.push_back(dense(keep.back()));
  }
  const int64_t device = outputs.begin()->device().index();
  if (!call([&] { return launch_loss(op, args, {slots.data(), slots.size()}, {}, device); })) {
    return false;
  }
  size_t k = 0;
  for (const at::Tensor& t : outputs) {
    if (!keep[k].is_same(t)) {
      t.copy_(keep[k]);
    }
    ++k;
  }
  return true;
}

at::Tensor weight_of(const std::optional<at::Tensor>& weight) {
  return weight && weight->defined() ? *weight : at::Tensor();
}

// ANCHOR: multi_margin
at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p_,
                             const at::Scalar& margin, const std::optional<at::Tensor>& weight,
                             int64_t reduction) {
  const at::Tensor w = weight_of(weight);
  check_devices("multi_margin_loss", {{"self", &self}, {"target", &target}, {"weight", &w}});
  const int64_t p = p_.toLong();
  TORCH_CHECK(p == 1 || p == 2, "only p == 1 and p == 2 supported");
  int64_t samples = 0, classes = 0;
  at::native::multi_margin_loss_shape_check(samples, classes, self.dim(), self, target, weight);
  const bool per_sample = reduction == at::Reduction::None && target.dim() > 0;
  at::Tensor out = per_sample ? at::empty({samples}, self.options()) : at::empty({}, self.options());
  if (self.numel() == 0) {
    return out.zero_();
  }
  if (!run(Loss::MultiMargin, margin_args(classes, reduction, p, margin.toDouble()), {out},
           {self, target, w})) {
    on_host("multi_margin_loss", self.scalar_type(), [&] {
      out.copy_(at::multi_margin_loss(host_alias(self), host_alias(target), p_, margin,
                                      w.defined() ? std::optional(host_alias(w)) : std::nullopt,
                                      reduction));
    });
  }
  return out;
}
// ANCHOR_END: multi_margin

at::Tensor multi_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                      const at::Tensor& target, const at::Scalar& p_,
                                      const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
  const at::Tensor w = weight_of(weight);
  check_devices("multi_margin_loss_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"target", &target}, {"weight", &w}});
  const int64_t p = p_.toLong();
  TORCH_CHECK(p == 1 || p == 2, "only p == 1 and p == 2 supported");
  int64_t samples = 0, classes = 0;
  at::native::multi_margin_loss_shape_check(samples, classes, self.dim(), self, target, weight);
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) {
    return grad_input;
  }
  if (!run(Loss::MultiMarginBackward, margin_args(classes, reduction, p, margin.toDouble()),
           {grad_input}, {grad_output, self, target, w})) {
    on_host("multi_margin_loss_backward", self.scalar_type(), [&] {
      grad_input.copy_(at::multi_margin_loss_backward(
          host_alias(grad_output), host_alias(self), host_alias(target), p_, margin,
          w.defined() ? std::optional(host_alias(w)) : std::nullopt, reduction));
    });
  }
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward(const at::Tensor& self,
                                                                  const at::Tensor& target,
                                                                  int64_t reduction) {
  check_devices("multilabel_margin_loss_forward", {{"self", &self}, {"target", &target}});
  int64_t samples = 0, classes = 0;
  at::native::multilabel_margin_loss_shape_check(samples, classes, self.dim(), self, target);
  const bool per_sample = reduction == at::Reduction::None && target.dim() > 1;
  at::Tensor out = per_sample ? at::empty({samples}, self.options()) : at::empty({}, self.options());
  at::Tensor is_target = at::empty(target.sizes(), self.options());
  if (self.numel() == 0) {
    return {out.zero_(), is_target.zero_()};
  }
  TORCH_CHECK(target.scalar_type() == at::kLong, "multilabel_margin_loss: expected target of dtype int64, but got ",
              target.scalar_type());
  if (!run(Loss::MultilabelMargin, margin_args(classes, reduction, 1, 1.0), {out, is_target},
           {self, target})) {
    on_host("multilabel_margin_loss_forward", self.scalar_type(), [&] {
      auto [o, i] = at::multilabel_margin_loss_forward(host_alias(self), host_alias(target), reduction);
      out.copy_(o);
      is_target.copy_(i);
    });
  }
  return {out, is_target};
}

at::Tensor multilabel_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction,
                                           const at::Tensor& is_target) {
  check_devices("multilabel_margin_loss_backward", {{"grad_output", &grad_output}, {"self", &self},
                                                    {"target", &target}, {"is_target", &is_target}});
  int64_t samples = 0, classes = 0;
  at::native::multilabel_margin_loss_shape_check(samples, classes, self.dim(), self, target);
  TORCH_CHECK(is_target.sizes() == target.sizes(), "inconsistent is_target size: ", is_target.sizes(),
              " for target of size: ", target.sizes());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) {
    return grad_input;
  }
  TORCH_CHECK(target.scalar_type() == at::kLong, "multilabel_margin_loss: expected target of dtype int64, but got ",
              target.scalar_type());
  if (!run(Loss::MultilabelMarginBackward, margin_args(classes, reduction, 1, 1.0), {grad_input},
           {grad_output, self, target, is_target})) {
    on_host("multilabel_margin_loss_backward", self.scalar_type(), [&] {
      grad_input.copy_(at::multilabel_margin_loss_backward(host_alias(grad_output), host_alias(self),
                                                           host_alias(target), reduction,
                                                           host_alias(is_target)));
    });
  }
  return grad_input;
}

} // namespace

void register_margin_losses() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("multi_margin_loss", TORCH_FN(multi_margin_loss));
    library.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward));
    library.impl("multilabel_margin_loss_forward", TORCH_FN(multilabel_margin_loss_forward));
    library.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
