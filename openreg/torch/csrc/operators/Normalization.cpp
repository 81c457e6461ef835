// Layer, group and batch normalization with their backwards (Rust kernel:
// src/operators/kernels/norm.rs). Without these, layer_norm decomposes into a batch norm and
// an addcmul that reach the CPU fallback. Each operand is made contiguous; the statistics are
// float32 when float16/bfloat16 input comes with float32 parameters ("mixed type"), as on CPU.

#include "operators/Structured.h"

#include <ATen/native/layer_norm.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/ops/native_group_norm.h>
#include <ATen/ops/native_group_norm_backward.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>
#include <torch/library.h>

namespace openreg {
namespace {

using Tensors = std::initializer_list<at::Tensor>;
using Result3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

at::Tensor opt(const std::optional<at::Tensor>& t) {
  return t.value_or(at::Tensor());
}

at::Tensor contiguous(const at::Tensor& t) {
  return t.defined() ? t.contiguous() : t;
}

// Runs the kernel over `operands` (outputs first, all contiguous). False: not our dtypes.
bool run(Norm op, const NormShape& shape, Tensors operands, c10::Device device) {
  c10::SmallVector<Dense, 10> slots;
  for (const at::Tensor& t : operands) {
    slots.push_back(dense(t));
  }
  return call([&] { return launch_norm(op, shape, {slots.data(), slots.size()}, device.index()); });
}

// A CPU result of the host path, moved to the device.
at::Tensor to_device(const at::Tensor& t, c10::Device device) {
  return t.defined() ? t.to(device) : t;
}

at::Tensor host(const at::Tensor& t) {
  return t.defined() ? host_alias(t) : t;
}

at::Tensor empty_if(bool wanted, const at::Tensor& like) {
  return wanted && like.defined() ? at::empty(like.sizes(), like.options()) : at::Tensor();
}

// ANCHOR: layer_norm
Result3 layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                   const std::optional<at::Tensor>& weight_opt,
                   const std::optional<at::Tensor>& bias_opt, double eps) {
  const at::Tensor weight = opt(weight_opt), bias = opt(bias_opt);
  check_devices("native_layer_norm", {{"input", &input}, {"weight", &weight}, {"bias", &bias}});
  // CPU's checks and messages; M rows of N elements.
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const auto stat_type =
      at::native::param_scalar_type(input, at::native::is_mixed_type(input, weight, bias));
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), x.options());
  at::Tensor mean = at::empty({M}, x.options().dtype(stat_type));
  at::Tensor rstd = at::empty({M}, x.options().dtype(stat_type));
  // Layer norm is group norm of one group whose channels are a row's elements.
  const NormShape shape{M, N, 1, 1, eps, 0.0, false};
  if (!run(Norm::GroupNorm, shape, {out, mean, rstd, x, contiguous(weight), contiguous(bias)},
           input.device())) {
    return on_host("native_layer_norm", input.scalar_type(), [&] {
      auto [o, m, r] = at::native_layer_norm(host(input), normalized_shape, host(weight), host(bias), eps);
      return Result3{to_device(o, input.device()), to_device(m, input.device()), to_device(r, input.device())};
    });
  }
  // The statistics keep the input's leading dimensions, with 1 for each normalized one.
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().end());
  for (size_t k = stat_shape.size() - normalized_shape.size(); k < stat_shape.size(); ++k) {
    stat_shape[k] = 1;
  }
  return {out, mean.view(stat_shape), rstd.view(stat_shape)};
}
// ANCHOR_END: layer_norm

Result3 layer_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                            at::IntArrayRef normalized_shape, const at::Tensor& mean,
                            const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
                            const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> mask) {
  const at::Tensor weight = opt(weight_opt), bias = opt(bias_opt);
  check_devices("native_layer_norm_backward", {{"grad_out", &grad_out}, {"input", &input},
                                               {"mean", &mean}, {"rstd", &rstd},
                                               {"weight", &weight}, {"bias", &bias}});
  auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_layer_norm_backward: grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  at::Tensor grad_input = empty_if(mask[0], input.contiguous());
  at::Tensor grad_weight = empty_if(mask[1], weight), grad_bias = empty_if(mask[2], bias);
  if (M == 0) {
    // No rows: the parameters' gradients are zero, as CPU's are.
    for (at::Tensor* g : {&grad_weight, &grad_bias}) {
      if (g->defined()) {
        g->zero_();
      }
    }
    return {grad_input, grad_weight, grad_bias};
  }
  const NormShape shape{M, N, 1, 1, 0.0, 0.0, false};
  if (!run(Norm::GroupNormBackward, shape,
           {grad_input, contiguous(grad_weight), contiguous(grad_bias), grad_out.contiguous(),
            input.contiguous(), mean.contiguous(), rstd.contiguous(), contiguous(weight)},
           input.device())) {
    return on_host("native_layer_norm_backward", input.scalar_type(), [&] {
      auto [gi, gw, gb] = at::native_layer_norm_backward(host(grad_out), host(input), normalized_shape,
                                                         host(mean), host(rstd), host(weight),
                                                         host(bias), mask);
      return Result3{to_device(gi, input.device()), to_device(gw, input.device()), to_device(gb, input.device())};
    });
  }
  return {grad_input, grad_weight, grad_bias};
}

void check_group_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                      int64_t N, int64_t C, int64_t HxW, int64_t group) {
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible ",
              "by num_groups, but got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "native_group_norm: input of size ", input.sizes(),
              " is not N=", N, " x C=", C, " x HxW=", HxW);
  for (const at::Tensor& t : {weight, bias}) {
    TORCH_CHECK(!t.defined() || (t.dim() == 1 && t.numel() == C),
                "Expected weight and bias to be vectors of size ", C, ", got one of size ", t.sizes());
  }
}

Result3 group_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
                   const std::optional<at::Tensor>& bias_opt, int64_t N, int64_t C, int64_t HxW,
                   int64_t group, double eps) {
  const at::Tensor weight = opt(weight_opt), bias = opt(bias_opt);
  check_devices("native_group_norm", {{"input", &input}, {"weight", &weight}, {"bias", &bias}});
  check_group_norm(input, weight, bias, N, C, HxW, group);
  const auto stat_type =
      at::native::param_scalar_type(input, at::native::is_mixed_type(input, weight, bias));
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), x.options());
  at::Tensor mean = at::empty({N, group}, x.options().dtype(stat_type));
  at::Tensor rstd = at::empty({N, group}, x.options().dtype(stat_type));
  if (!run(Norm::GroupNorm, NormShape{N, C, HxW, group, eps, 0.0, false},
           {out, mean, rstd, x, contiguous(weight), contiguous(bias)}, input.device())) {
    return on_host("native_group_norm", input.scalar_type(), [&] {
      auto [o, m, r] = at::native_group_norm(host(input), host(weight), host(bias), N, C, HxW, group, eps);
      return Result3{to_device(o, input.device()), to_device(m, input.device()), to_device(r, input.device())};
    });
  }
  return {out, mean, rstd};
}

Result3 group_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                            const at::Tensor& mean, const at::Tensor& rstd,
                            const std::optional<at::Tensor>& weight_opt, int64_t N, int64_t C,
                            int64_t HxW, int64_t group, std::array<bool, 3> mask) {
  const at::Tensor weight = opt(weight_opt);
  check_devices("native_group_norm_backward", {{"grad_out", &grad_out}, {"input", &input},
                                               {"mean", &mean}, {"rstd", &rstd}, {"weight", &weight}});
  check_group_norm(input, weight, at::Tensor(), N, C, HxW, group);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_group_norm_backward: grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  // The parameter gradients have C elements, in the weight's dtype (or the input's).
  const auto param = weight.defined() ? weight : at::empty({C}, input.options());
  at::Tensor grad_input = empty_if(mask[0], input.contiguous());
  at::Tensor grad_weight = empty_if(mask[1], param), grad_bias = empty_if(mask[2], param);
  if (!run(Norm::GroupNormBackward, NormShape{N, C, HxW, group, 0.0, 0.0, false},
           {grad_input, grad_weight, grad_bias, grad_out.contiguous(), input.contiguous(),
            mean.contiguous(), rstd.contiguous(), contiguous(weight)},
           input.device())) {
    return on_host("native_group_norm_backward", input.scalar_type(), [&] {
      auto [gi, gw, gb] = at::native_group_norm_backward(host(grad_out), host(input), host(mean),
                                                         host(rstd), host(weight), N, C, HxW, group, mask);
      return Result3{to_device(gi, input.device()), to_device(gw, input.device()), to_device(gb, input.device())};
    });
  }
  return {grad_input, grad_weight, grad_bias};
}

// ANCHOR: batch_norm
Result3 batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
                   const std::optional<at::Tensor>& bias_opt,
                   const std::optional<at::Tensor>& running_mean_opt,
                   const std::optional<at::Tensor>& running_var_opt, bool training,
                   double momentum, double eps) {
  const at::Tensor weight = opt(weight_opt), bias = opt(bias_opt);
  const at::Tensor running_mean = opt(running_mean_opt), running_var = opt(running_var_opt);
  check_devices("native_batch_norm", {{"input", &input}, {"weight", &weight}, {"bias", &bias},
                                      {"running_mean", &running_mean}, {"running_var", &running_var}});
  TORCH_CHECK(input.dim() >= 2, "native_batch_norm: expected an input of 2 or more dimensions, got ",
              input.sizes());
  const int64_t N = input.size(0), C = input.size(1), inner = N * C > 0 ? input.numel() / (N * C) : 0;
  for (auto [name, t] : {std::pair{"weight", weight}, {"bias", bias}, {"running_mean", running_mean},
                         {"running_var", running_var}}) {
    TORCH_CHECK(!t.defined() || t.numel() == C, name, " should contain ", C, " elements not ",
                t.numel());
  }
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()),
              "running_mean and running_var must be defined in evaluation mode");
  const auto stat_type = at::native::param_scalar_type(
      input, at::native::is_mixed_type(input, weight, bias, running_mean, running_var));
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), x.options());
  at::Tensor save_mean = at::empty({training ? C : 0}, x.options().dtype(stat_type));
  at::Tensor save_invstd = at::empty({training ? C : 0}, x.options().dtype(stat_type));
  // Updated in place: a non-contiguous buffer is computed in a copy and copied back.
  const at::Tensor rm = contiguous(running_mean), rv = contiguous(running_var);
  // In training the kernel updates the running statistics; in eval it normalizes with them.
  if (!run(Norm::BatchNorm, NormShape{N, C, inner, 1, eps, momentum, training},
           {out, save_mean, save_invstd, rm, rv, x, contiguous(weight), contiguous(bias)},
           input.device())) {
    return on_host("native_batch_norm", input.scalar_type(), [&] {
      auto [o, m, s] = at::native_batch_norm(host(input), host(weight), host(bias), host(running_mean),
                                             host(running_var), training, momentum, eps);
      return Result3{to_device(o, input.device()), to_device(m, input.device()), to_device(s, input.device())};
    });
  }
  for (auto [buffer, copy] : {std::pair{running_mean, rm}, {running_var, rv}}) {
    if (training && buffer.defined() && !buffer.is_same(copy)) {
      buffer.copy_(copy);
    }
  }
  return {out, save_mean, save_invstd};
}
// ANCHOR_END: batch_norm

Result3 batch_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                            const std::optional<at::Tensor>& weight_opt,
                            const std::optional<at::Tensor>& running_mean_opt,
                            const std::optional<at::Tensor>& running_var_opt,
                            const std::optional<at::Tensor>& save_mean_opt,
                            const std::optional<at::Tensor>& save_invstd_opt, bool training,
                            double eps, std::array<bool, 3> mask) {
  const at::Tensor weight = opt(weight_opt), running_mean = opt(running_mean_opt),
                   running_var = opt(running_var_opt), save_mean = opt(save_mean_opt),
                   save_invstd = opt(save_invstd_opt);
  check_devices("native_batch_norm_backward",
                {{"grad_out", &grad_out}, {"input", &input}, {"weight", &weight},
                 {"running_mean", &running_mean}, {"running_var", &running_var},
                 {"save_mean", &save_mean}, {"save_invstd", &save_invstd}});
  TORCH_CHECK(input.dim() >= 2 && grad_out.sizes() == input.sizes(),
              "native_batch_norm_backward: expected grad_out and input of one size (2 or more "
              "dimensions), got ", grad_out.sizes(), " and ", input.sizes());
  const int64_t N = input.size(0), C = input.size(1), inner = N * C > 0 ? input.numel() / (N * C) : 0;
  const auto param = weight.defined() ? weight : at::empty({C}, input.options());
  at::Tensor grad_input = empty_if(mask[0], input.contiguous());
  at::Tensor grad_weight = empty_if(mask[1], param), grad_bias = empty_if(mask[2], param);
  const bool done =
      run(Norm::BatchNormBackward, NormShape{N, C, inner, 1, eps, 0.0, training},
          {grad_input, grad_weight, grad_bias, grad_out.contiguous(), input.contiguous(),
           contiguous(weight), contiguous(running_mean), contiguous(running_var),
           contiguous(save_mean), contiguous(save_invstd)},
          input.device());
  if (!done) {
    return on_host("native_batch_norm_backward", input.scalar_type(), [&] {
      auto [gi, gw, gb] = at::native_batch_norm_backward(
          host(grad_out), host(input), host(weight), host(running_mean), host(running_var),
          host(save_mean), host(save_invstd), training, eps, mask);
      return Result3{to_device(gi, input.device()), to_device(gw, input.device()), to_device(gb, input.device())};
    });
  }
  return {grad_input, grad_weight, grad_bias};
}

} // namespace

void register_normalization() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("native_layer_norm", TORCH_FN(layer_norm));
    library.impl("native_layer_norm_backward", TORCH_FN(layer_norm_backward));
    library.impl("native_group_norm", TORCH_FN(group_norm));
    library.impl("native_group_norm_backward", TORCH_FN(group_norm_backward));
    library.impl("native_batch_norm", TORCH_FN(batch_norm));
    library.impl("native_batch_norm_backward", TORCH_FN(batch_norm_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
