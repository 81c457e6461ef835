// What torch.optim runs on the device. Three modes, three paths:
// - foreach (the default): the `_foreach_*` operators, one launch per list
//   (src/operators/kernels/foreach.rs); a list the launch cannot take (another dtype, a
//   non-contiguous tensor) goes per tensor through ATen's slow path, whose ops are ours too;
// - fused=True: `_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, the whole update in one pass
//   (src/operators/kernels/optim.rs); PyTorch lists PrivateUse1 as a fused-capable device;
// - foreach=False: one op at a time (addcmul_, addcdiv_, lerp_, sqrt: PointwiseOps.cpp).
// GradScaler's two kernels are here too.

#include "operators/Structured.h"

#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_fused_adam_native.h>
#include <ATen/ops/_fused_adamw_native.h>
#include <ATen/ops/_fused_sgd_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/maximum.h>
#include <torch/library.h>

namespace openreg {
namespace {

using at::TensorList;

// ANCHOR: run_foreach
// An input of a foreach operation: a list, or (list empty) one value per tensor or for all.
struct Arg {
  TensorList list;
  std::vector<double> values;
};

bool launchable(const at::Tensor& t, const at::Tensor& first) {
  return t.defined() && t.is_privateuseone() && t.scalar_type() == at::kFloat &&
         t.is_contiguous() && !t.is_neg() && t.device() == first.device();
}

// out[i] = op(inputs..[i]) for every i in one launch; `x`: the op's scalar, per tensor or one.
// False, having done nothing, if a tensor is not a contiguous float32 one of its list's size.
bool run_foreach(Pointwise op, TensorList out, std::vector<Arg> inputs, std::vector<double> x = {0.0}) {
  const size_t n = out.size();
  std::vector<Dense> operands;
  std::vector<double> constants, scalars;
  for (size_t i = 0; i < n; ++i) {
    if (!launchable(out[i], out[0])) {
      return false;
    }
    operands.push_back(dense(out[i]));
    constants.push_back(0.0);
    for (const Arg& arg : inputs) {
      if (arg.list.empty()) {
        operands.push_back(dense(at::Tensor()));
        constants.push_back(arg.values[arg.values.size() == 1 ? 0 : i]);
        continue;
      }
      const at::Tensor& t = arg.list[i];
      if (!launchable(t, out[0]) || t.sizes() != out[i].sizes()) {
        return false;
      }
      operands.push_back(dense(t));
      constants.push_back(0.0);
    }
    scalars.push_back(x[x.size() == 1 ? 0 : i]);
    scalars.push_back(0.0);
  }
  return call([&] {
    return launch_foreach(op, {operands.data(), operands.size()}, {constants.data(), constants.size()},
                          {scalars.data(), scalars.size()}, n, out[0].device().index());
  });
}
// ANCHOR_END: run_foreach

std::vector<at::Tensor> like(TensorList self) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : self) {
    out.push_back(at::empty_like(t));
  }
  return out;
}

std::vector<double> values(at::ArrayRef<at::Scalar> scalars) {
  std::vector<double> v;
  for (const at::Scalar& s : scalars) {
    v.push_back(s.isComplex() ? std::nan("") : s.toDouble());
  }
  return v;
}

bool real(const at::Scalar& s) {
  return !s.isComplex();
}

bool real(at::ArrayRef<at::Scalar> s) {
  return std::none_of(s.begin(), s.end(), [](const at::Scalar& v) { return v.isComplex(); });
}

namespace slow = at::native;

// ANCHOR: foreach_add
void foreach_add_list_(TensorList self, TensorList other, const at::Scalar& alpha) {
  at::native::check_foreach_api_restrictions(self, other);
  if (!real(alpha) || !run_foreach(Pointwise::Add, self, {{self, {}}, {other, {}}}, {alpha.toDouble()})) {
    slow::foreach_tensor_add_list_kernel_slow_(self, other, alpha);
  }
}
// ANCHOR_END: foreach_add

std::vector<at::Tensor> foreach_add_list(TensorList self, TensorList other, const at::Scalar& alpha) {
  at::native::check_foreach_api_restrictions(self, other);
  auto out = like(self);
  if (real(alpha) && run_foreach(Pointwise::Add, out, {{self, {}}, {other, {}}}, {alpha.toDouble()})) {
    return out;
  }
  return slow::foreach_tensor_add_list_kernel_slow(self, other, alpha);
}

void foreach_sub_list_(TensorList self, TensorList other, const at::Scalar& alpha) {
  at::native::check_foreach_api_restrictions(self, other);
  if (!real(alpha) || !run_foreach(Pointwise::Add, self, {{self, {}}, {other, {}}}, {-alpha.toDouble()})) {
    slow::foreach_tensor_sub_list_kernel_slow_(self, other, alpha);
  }
}

void foreach_add_scalar_(TensorList self, const at::Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  if (!real(scalar) || !run_foreach(Pointwise::Add, self, {{self, {}}, {{}, {scalar.toDouble()}}}, {1.0})) {
    slow::foreach_tensor_add_scalar_kernel_slow_(self, scalar);
  }
}

void foreach_mul_scalar_(TensorList self, const at::Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  if (!real(scalar) || !run_foreach(Pointwise::Mul, self, {{self, {}}, {{}, {scalar.toDouble()}}})) {
    slow::foreach_tensor_mul_scalar_kernel_slow_(self, scalar);
  }
}

std::vector<at::Tensor> foreach_mul_scalar(TensorList self, const at::Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  auto out = like(self);
  if (real(scalar) && run_foreach(Pointwise::Mul, out, {{self, {}}, {{}, {scalar.toDouble()}}})) {
    return out;
  }
  return slow::foreach_tensor_mul_scalar_kernel_slow(self, scalar);
}

void foreach_mul_list_(TensorList self, TensorList other) {
  at::native::check_foreach_api_restrictions(self, other);
  if (!run_foreach(Pointwise::Mul, self, {{self, {}}, {other, {}}})) {
    slow::foreach_tensor_mul_list_kernel_slow_(self, other);
  }
}

// Adam's amsgrad keeps the running maximum of exp_avg_sq (NaN wins, as in torch.maximum).
void foreach_maximum_list_(TensorList self, TensorList other) {
  at::native::check_foreach_api_restrictions(self, other);
  if (!run_foreach(Pointwise::Maximum, self, {{self, {}}, {other, {}}})) {
    // ATen's slow path would call clamp_min, which has no kernel here; maximum has one.
    for (size_t i = 0; i < self.size(); ++i) {
      at::Tensor out = self[i];  // a handle: writes go to the parameter state itself
      at::maximum_out(out, self[i], other[i]);
    }
  }
}

void foreach_div_scalar_(TensorList self, const at::Scalar& scalar) {
  at::native::check_foreach_api_restrictions(self);
  if (!real(scalar) || !run_foreach(Pointwise::Div, self, {{self, {}}, {{}, {scalar.toDouble()}}})) {
    slow::foreach_tensor_div_scalar_kernel_slow_(self, scalar);
  }
}

void foreach_div_scalarlist_(TensorList self, at::ArrayRef<at::Scalar> scalars) {
  at::native::check_foreach_api_restrictions(self, scalars);
  if (!real(scalars) || !run_foreach(Pointwise::Div, self, {{self, {}}, {{}, values(scalars)}})) {
    slow::foreach_tensor_div_scalarlist_kernel_slow_(self, scalars);
  }
}

void foreach_lerp_scalar_(TensorList self, TensorList end, const at::Scalar& weight) {
  at::native::check_foreach_api_restrictions(self, end);
  if (!real(weight) || !run_foreach(Pointwise::Lerp, self, {{self, {}}, {end, {}}}, {weight.toDouble()})) {
    slow::foreach_tensor_lerp_list_kernel_slow_(self, end, weight);
  }
}

void foreach_addcmul_scalar_(TensorList self, TensorList t1, TensorList t2, const at::Scalar& value) {
  at::native::check_foreach_api_restrictions(self, t1, t2);
  if (!real(value) ||
      !run_foreach(Pointwise::Addcmul, self, {{self, {}}, {t1, {}}, {t2, {}}}, {value.toDouble()})) {
    slow::foreach_tensor_addcmul_scalar_slow_(self, t1, t2, value);
  }
}

void foreach_addcdiv_scalar_(TensorList self, TensorList t1, TensorList t2, const at::Scalar& value) {
  at::native::check_foreach_api_restrictions(self, t1, t2);
  if (!real(value) ||
      !run_foreach(Pointwise::Addcdiv, self, {{self, {}}, {t1, {}}, {t2, {}}}, {value.toDouble()})) {
    slow::foreach_tensor_addcdiv_scalar_slow_(self, t1, t2, value);
  }
}

void foreach_addcdiv_scalarlist_(TensorList self, TensorList t1, TensorList t2,
                                 at::ArrayRef<at::Scalar> scalars) {
  at::native::check_foreach_api_restrictions(self, t1, t2, scalars);
  if (!real(scalars) ||
      !run_foreach(Pointwise::Addcdiv, self, {{self, {}}, {t1, {}}, {t2, {}}}, values(scalars))) {
    slow::foreach_tensor_addcdiv_scalarlist_slow_(self, t1, t2, scalars);
  }
}

std::vector<at::Tensor> foreach_sqrt(TensorList self) {
  at::native::check_foreach_api_restrictions(self);
  auto out = like(self);
  if (run_foreach(Pointwise::Sqrt, out, {{self, {}}})) {
    return out;
  }
  return slow::foreach_tensor_sqrt_slow(self);
}

void foreach_sqrt_(TensorList self) {
  at::native::check_foreach_api_restrictions(self);
  if (!run_foreach(Pointwise::Sqrt, self, {{self, {}}})) {
    slow::foreach_tensor_sqrt_slow_(self);
  }
}

// ANCHOR: fused_adam
// The fused steps check what CPU's do: lists of one length, tensors of one device.
void check_fused(const char* op, std::initializer_list<std::pair<const char*, TensorList>> lists,
                 const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const size_t n = lists.begin()->second.size();
  std::optional<c10::Device> device;
  for (const auto& [name, list] : lists) {
    TORCH_CHECK(list.empty() || list.size() == n, op, ": expected ", name, " to have ", n,
                " tensors, got ", list.size());
    for (const at::Tensor& t : list) {
      c10::impl::check_and_update_common_device(device, t, op, name);
    }
  }
  for (const auto* t : {&grad_scale, &found_inf}) {
    if (t->has_value()) {
      c10::impl::check_and_update_common_device(device, **t, op, "grad_scale/found_inf");
    }
  }
}

void fused_adam(Fused kind, const char* op, TensorList params, TensorList grads,
                TensorList exp_avgs, TensorList exp_avg_sqs, TensorList max_exp_avg_sqs,
                TensorList steps, double lr, double beta1, double beta2, double weight_decay,
                double eps, bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  check_fused(op, {{"self", params}, {"grads", grads}, {"exp_avgs", exp_avgs},
                   {"exp_avg_sqs", exp_avg_sqs}, {"max_exp_avg_sqs", max_exp_avg_sqs},
                   {"state_steps", steps}},
              grad_scale, found_inf);
  if (params.empty()) {
    return;
  }
  std::vector<at::Tensor> keep;  // contiguous copies, written back after
  std::vector<Dense> operands;
  for (size_t i = 0; i < params.size(); ++i) {
    for (TensorList list : {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps}) {
      keep.push_back(list.empty() ? at::Tensor() : list[i].contiguous());
      operands.push_back(dense(keep.back()));
    }
  }
  const FusedArgs args{lr, beta1, beta2, weight_decay, eps, 0.0, 0.0, amsgrad, maximize, false, false};
  const bool done = call([&] {
    return launch_fused_step(kind, args, {operands.data(), operands.size()},
                             dense(grad_scale.value_or(at::Tensor())),
                             dense(found_inf.value_or(at::Tensor())), params[0].device().index());
  });
  if (!done) {
    return on_host(op, params[0].scalar_type(), [&] {
      auto host = [](TensorList list) {
        std::vector<at::Tensor> v;
        for (const at::Tensor& t : list) {
          v.push_back(host_alias(t));
        }
        return v;
      };
      auto scale = grad_scale ? std::optional(host_alias(*grad_scale)) : std::nullopt;
      auto inf = found_inf ? std::optional(host_alias(*found_inf)) : std::nullopt;
      using Kernel = void (*)(TensorList, TensorList, TensorList, TensorList, TensorList, TensorList,
                              double, double, double, double, double, bool, bool,
                              const std::optional<at::Tensor>&, const std::optional<at::Tensor>&);
      Kernel cpu = kind == Fused::Adam ? Kernel(&at::native::_fused_adam_kernel_cpu_)
                                       : Kernel(&at::native::_fused_adamw_kernel_cpu_);
      cpu(host(params), host(grads), host(exp_avgs), host(exp_avg_sqs), host(max_exp_avg_sqs),
          host(steps), lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, scale, inf);
      return;
    });
  }
  // A parameter or state that was not contiguous was computed in a copy.
  size_t k = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    for (TensorList list : {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps}) {
      if (!list.empty() && !keep[k].is_same(list[i])) {
        list[i].copy_(keep[k]);
      }
      ++k;
    }
  }
}
// ANCHOR_END: fused_adam

void fused_adam_(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                 TensorList max_exp_avg_sqs, TensorList steps, double lr, double beta1,
                 double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                 const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  fused_adam(Fused::Adam, "_fused_adam_", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
             steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_adamw_(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                  TensorList max_exp_avg_sqs, TensorList steps, double lr, double beta1,
                  double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                  const std::optional<at::Tensor>& grad_scale,
                  const std::optional<at::Tensor>& found_inf) {
  fused_adam(Fused::AdamW, "_fused_adamw_", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
             steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_sgd_(TensorList params, TensorList grads, TensorList momentum_buffers,
                double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  const char* op = "_fused_sgd_";
  check_fused(op, {{"self", params}, {"grads", grads}, {"momentum_buffer_list", momentum_buffers}},
              grad_scale, found_inf);
  TORCH_CHECK(momentum == 0.0 || momentum_buffers.size() == params.size(), op,
              ": momentum ", momentum, " needs a momentum buffer per parameter");
  if (params.empty()) {
    return;
  }
  std::vector<at::Tensor> keep;
  std::vector<Dense> operands;
  for (size_t i = 0; i < params.size(); ++i) {
    for (TensorList list : {params, grads, momentum == 0.0 ? TensorList() : momentum_buffers}) {
      keep.push_back(list.empty() ? at::Tensor() : list[i].contiguous());
      operands.push_back(dense(keep.back()));
    }
  }
  const FusedArgs args{lr, 0.0, 0.0, weight_decay, 0.0, momentum, dampening, false, maximize, nesterov,
                       is_first_step};
  const bool done = call([&] {
    return launch_fused_step(Fused::Sgd, args, {operands.data(), operands.size()},
                             dense(grad_scale.value_or(at::Tensor())),
                             dense(found_inf.value_or(at::Tensor())), params[0].device().index());
  });
  if (!done) {
    return on_host(op, params[0].scalar_type(), [&] {
      std::vector<at::Tensor> p, g, b;
      for (size_t i = 0; i < params.size(); ++i) {
        p.push_back(host_alias(params[i]));
        g.push_back(host_alias(grads[i]));
        if (!momentum_buffers.empty()) {
          b.push_back(host_alias(momentum_buffers[i]));
        }
      }
      auto scale = grad_scale ? std::optional(host_alias(*grad_scale)) : std::nullopt;
      auto inf = found_inf ? std::optional(host_alias(*found_inf)) : std::nullopt;
      at::native::_fused_sgd_kernel_cpu_(p, g, b, weight_decay, momentum, lr, dampening, nesterov,
                                         maximize, is_first_step, scale, inf);
      return;
    });
  }
  size_t k = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    for (TensorList list : {params, grads, momentum_buffers}) {
      if (keep[k].defined() && !keep[k].is_same(list[i])) {
        list[i].copy_(keep[k]);
      }
      ++k;
    }
  }
}

// ANCHOR: grad_scaler
void amp_unscale_(TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  const char* op = "_amp_foreach_non_finite_check_and_unscale_";
  check_fused(op, {{"self", grads}}, found_inf, inv_scale);
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  std::vector<at::Tensor> keep;
  std::vector<Dense> operands;
  for (const at::Tensor& g : grads) {
    keep.push_back(g.contiguous());
    operands.push_back(dense(keep.back()));
  }
  const bool done = grads.empty() || call([&] {
    return launch_amp_unscale({operands.data(), operands.size()}, dense(found_inf), dense(inv_scale),
                              found_inf.device().index());
  });
  if (!done) {
    return on_host(op, grads[0].scalar_type(), [&] {
      at::Tensor inf = host_alias(found_inf);
      for (const at::Tensor& g : grads) {
        at::_amp_foreach_non_finite_check_and_unscale_({host_alias(g)}, inf, host_alias(inv_scale));
      }
      return;
    });
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!keep[i].is_same(grads[i])) {
      grads[i].copy_(keep[i]);
    }
  }
}

at::Tensor& amp_update_scale_(at::Tensor& scale, at::Tensor& growth_tracker,
                              const at::Tensor& found_inf, double growth, double backoff,
                              int64_t interval) {
  check_devices("_amp_update_scale_",
                {{"self", &scale}, {"growth_tracker", &growth_tracker}, {"found_inf", &found_inf}});
  TORCH_CHECK(growth_tracker.numel() == 1 && growth_tracker.scalar_type() == at::kInt,
              "growth_tracker must be a 1-element int32 tensor.");
  TORCH_CHECK(scale.numel() == 1 && scale.scalar_type() == at::kFloat,
              "current_scale must be a 1-element float tensor.");
  TORCH_CHECK(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat,
              "found_inf must be a 1-element float tensor.");
  const bool done = call([&] {
    return launch_amp_update_scale(dense(scale), dense(growth_tracker), dense(found_inf), growth,
                                   backoff, interval, scale.device().index());
  });
  TORCH_CHECK(done, "_amp_update_scale_: unsupported operands");
  return scale;
}
// ANCHOR_END: grad_scaler

} // namespace

void register_optimizers() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_foreach_add_.List", TORCH_FN(foreach_add_list_));
    library.impl("_foreach_add.List", TORCH_FN(foreach_add_list));
    library.impl("_foreach_sub_.List", TORCH_FN(foreach_sub_list_));
    library.impl("_foreach_add_.Scalar", TORCH_FN(foreach_add_scalar_));
    library.impl("_foreach_mul_.Scalar", TORCH_FN(foreach_mul_scalar_));
    library.impl("_foreach_mul.Scalar", TORCH_FN(foreach_mul_scalar));
    library.impl("_foreach_mul_.List", TORCH_FN(foreach_mul_list_));
    library.impl("_foreach_maximum_.List", TORCH_FN(foreach_maximum_list_));
    library.impl("_foreach_div_.Scalar", TORCH_FN(foreach_div_scalar_));
    library.impl("_foreach_div_.ScalarList", TORCH_FN(foreach_div_scalarlist_));
    library.impl("_foreach_lerp_.Scalar", TORCH_FN(foreach_lerp_scalar_));
    library.impl("_foreach_addcmul_.Scalar", TORCH_FN(foreach_addcmul_scalar_));
    library.impl("_foreach_addcdiv_.Scalar", TORCH_FN(foreach_addcdiv_scalar_));
    library.impl("_foreach_addcdiv_.ScalarList", TORCH_FN(foreach_addcdiv_scalarlist_));
    library.impl("_foreach_sqrt", TORCH_FN(foreach_sqrt));
    library.impl("_foreach_sqrt_", TORCH_FN(foreach_sqrt_));
    library.impl("_fused_adam_", TORCH_FN(fused_adam_));
    library.impl("_fused_adamw_", TORCH_FN(fused_adamw_));
    library.impl("_fused_sgd_", TORCH_FN(fused_sgd_));
    library.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(amp_unscale_));
    library.impl("_amp_update_scale_", TORCH_FN(amp_update_scale_));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
