// Elementwise operators with Rust kernels: PyTorch's structured `meta` functions decide shapes,
// dtypes and errors; src/operators/kernels/elementwise.rs computes. Dtypes the kernels do not compute
// in (integers, float64, complex) run ATen's CPU kernel over the same memory, said once.

#include "operators/Structured.h"

#include <ATen/ops/add.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/div.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/fill.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/leaky_relu_backward.h>
#include <ATen/ops/leaky_relu_backward_meta.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/silu_backward.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/log.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/threshold_backward.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

namespace openreg {

// ANCHOR: run_pointwise
bool run_pointwise(at::TensorIteratorBase& iter, Pointwise op, double scalar, double scalar2) {
  const int n = iter.ntensors();
  if (n > 4 || iter.noutputs() != 1) {
    return false;
  }
  std::array<size_t, 4> data{};
  std::array<size_t, 8> storages{};  // (address, bytes) of each operand's storage
  std::array<int8_t, 4> dtypes{};
  std::array<double, 4> constants{};
  c10::SmallVector<int64_t, 12> strides;
  for (int k = 0; k < n; ++k) {
    strides.append(iter.strides(k).begin(), iter.strides(k).end());
    // A CPU scalar (the 2 in `x + 2`) is passed by value: device code cannot read CPU memory.
    if (k > 0 && iter.is_cpu_scalar(k)) {
      dtypes[k] = static_cast<int8_t>(iter.common_dtype());
      constants[k] = iter.scalar_value<double>(k);
      continue;
    }
    // Device code reads device memory only: an operand elsewhere is the caller's error.
    TORCH_CHECK(iter.device(k).is_privateuseone(), "Expected all tensors to be on the same device, but found "
                "at least two devices, ", iter.device(0), " and ", iter.device(k), "!");
    dtypes[k] = static_cast<int8_t>(iter.dtype(k));
    data[k] = addr(iter.data_ptr(k));
    const auto& storage = iter.tensor_base(k).storage();
    storages[2 * k] = addr(storage.data());
    storages[2 * k + 1] = storage.nbytes();
  }
  // False (nothing launched) when the kernels do not compute in these dtypes.
  return call([&] {
    return launch_pointwise(op, scalar, scalar2, {data.data(), static_cast<size_t>(n)},
                            {storages.data(), static_cast<size_t>(2 * n)},
                            {dtypes.data(), static_cast<size_t>(n)},
                            {constants.data(), static_cast<size_t>(n)},
                            {iter.shape().data(), iter.shape().size()},
                            {strides.data(), strides.size()}, iter.device(0).index());
  });
}
// ANCHOR_END: run_pointwise

namespace {

double to_double(const at::Scalar& s) {
  return s.isComplex() ? 0.0 : s.toDouble();
}

// ANCHOR: structured_op
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return pointwise<at::meta::structured_add_Tensor, Variant::Functional>(
      "add", Pointwise::Add, to_double(alpha), {},
      [&](at::Tensor out) { at::add_out(out, host_alias(self), host_alias(other), alpha); },
      self, other, alpha);
}
// ANCHOR_END: structured_op

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  pointwise<at::meta::structured_add_Tensor, Variant::InPlace>(
      "add_", Pointwise::Add, to_double(alpha), self,
      [&](at::Tensor out) { at::add_out(out, out, host_alias(other), alpha); }, self, other,
      alpha);
  return self;
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  pointwise<at::meta::structured_add_Tensor, Variant::Out>(
      "add.out", Pointwise::Add, to_double(alpha), out,
      [&](at::Tensor o) { at::add_out(o, host_alias(self), host_alias(other), alpha); }, self,
      other, alpha);
  return out;
}

// a - alpha * b is a + (-alpha) * b, exactly, in IEEE arithmetic.
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return pointwise<at::meta::structured_sub_Tensor, Variant::Functional>(
      "sub", Pointwise::Add, -to_double(alpha), {},
      [&](at::Tensor out) { at::sub_out(out, host_alias(self), host_alias(other), alpha); },
      self, other, alpha);
}

at::Tensor& sub_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  pointwise<at::meta::structured_sub_Tensor, Variant::InPlace>(
      "sub_", Pointwise::Add, -to_double(alpha), self,
      [&](at::Tensor out) { at::sub_out(out, out, host_alias(other), alpha); }, self, other,
      alpha);
  return self;
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  pointwise<at::meta::structured_sub_Tensor, Variant::Out>(
      "sub.out", Pointwise::Add, -to_double(alpha), out,
      [&](at::Tensor o) { at::sub_out(o, host_alias(self), host_alias(other), alpha); }, self,
      other, alpha);
  return out;
}

// mul and div: the same three variants, without alpha.
#define OPENREG_BINARY(name, kernel)                                                            \
  at::Tensor name(const at::Tensor& self, const at::Tensor& other) {                           \
    return pointwise<at::meta::structured_##name##_Tensor, Variant::Functional>(               \
        #name, Pointwise::kernel, 0.0, {},                                                      \
        [&](at::Tensor out) { at::name##_out(out, host_alias(self), host_alias(other)); },      \
        self, other);                                                                           \
  }                                                                                             \
  at::Tensor& name##_(at::Tensor& self, const at::Tensor& other) {                             \
    pointwise<at::meta::structured_##name##_Tensor, Variant::InPlace>(                         \
        #name "_", Pointwise::kernel, 0.0, self,                                                \
        [&](at::Tensor out) { at::name##_out(out, out, host_alias(other)); }, self, other);     \
    return self;                                                                                \
  }                                                                                             \
  at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {   \
    pointwise<at::meta::structured_##name##_Tensor, Variant::Out>(                             \
        #name ".out", Pointwise::kernel, 0.0, out,                                              \
        [&](at::Tensor o) { at::name##_out(o, host_alias(self), host_alias(other)); }, self,    \
        other);                                                                                 \
    return out;                                                                                 \
  }

OPENREG_BINARY(mul, Mul)
OPENREG_BINARY(div, Div)

// ANCHOR: div_mode
// div with rounding_mode "trunc" or "floor" (floor_divide is the latter). Integer division
// by zero is CPU's ZeroDivisionError, which needs the divisor's values: an integer division
// whose divisor is not a nonzero CPU scalar runs CPU's kernel, which reads them.
template <Variant kind>
at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                    const at::Tensor& given = {}) {
  Structured<at::meta::structured_div_Tensor_mode, kind> s(given);
  s.meta(self, other, mode);
  const Pointwise op = !mode ? Pointwise::Div : *mode == "trunc" ? Pointwise::DivTrunc : Pointwise::DivFloor;
  const bool integral = at::isIntegralType(s.common_dtype(), /*includeBool=*/true);
  const bool safe = !integral || (other.is_cpu() && other.dim() == 0 && other.item().toDouble() != 0);
  if (!safe || !run_pointwise(s, op)) {
    on_host("div.Tensor_mode", s.common_dtype(), [&] {
      at::Tensor out = host_alias(s.maybe_get_output(0));
      at::div_out(out, kind == Variant::InPlace ? out : host_alias(self), host_alias(other), mode);
    });
  }
  return s.result();
}

at::Tensor div_tensor_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  return div_mode<Variant::Functional>(self, other, mode);
}
at::Tensor& div__tensor_mode(at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
  div_mode<Variant::InPlace>(self, other, mode, self);
  return self;
}
at::Tensor& div_out_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
  div_mode<Variant::Out>(self, other, mode, out);
  return out;
}
at::Tensor floor_divide(const at::Tensor& self, const at::Tensor& other) {
  return div_mode<Variant::Functional>(self, other, "floor");
}
at::Tensor& floor_divide_(at::Tensor& self, const at::Tensor& other) {
  div_mode<Variant::InPlace>(self, other, "floor", self);
  return self;
}
at::Tensor& floor_divide_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  div_mode<Variant::Out>(self, other, "floor", out);
  return out;
}
// ANCHOR_END: div_mode

// Unary operators: functional, in-place and out=.
#define OPENREG_UNARY(name, kernel)                                                             \
  at::Tensor name(const at::Tensor& self) {                                                    \
    return pointwise<at::meta::structured_##name, Variant::Functional>(                        \
        #name, Pointwise::kernel, 0.0, {},                                                      \
        [&](at::Tensor out) { at::name##_out(out, host_alias(self)); }, self);                  \
  }                                                                                             \
  at::Tensor& name##_(at::Tensor& self) {                                                      \
    pointwise<at::meta::structured_##name, Variant::InPlace>(                                  \
        #name "_", Pointwise::kernel, 0.0, self,                                                \
        [&](at::Tensor out) { at::name##_out(out, out); }, self);                               \
    return self;                                                                                \
  }                                                                                             \
  at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {                            \
    pointwise<at::meta::structured_##name, Variant::Out>(                                      \
        #name ".out", Pointwise::kernel, 0.0, out,                                              \
        [&](at::Tensor o) { at::name##_out(o, host_alias(self)); }, self);                      \
    return out;                                                                                 \
  }

OPENREG_UNARY(neg, Neg)
OPENREG_UNARY(exp, Exp)
OPENREG_UNARY(sigmoid, Sigmoid)
OPENREG_UNARY(tanh, Tanh)
OPENREG_UNARY(silu, Silu)
OPENREG_UNARY(sqrt, Sqrt)
OPENREG_UNARY(reciprocal, Reciprocal)
OPENREG_UNARY(log, Log)

// ANCHOR: activations
// gelu's `approximate` ("none" or "tanh") becomes the kernel's scalar. The meta function does
// not look at it (CPU's kernel does): any other string is CPU's error here.
double gelu_kind(std::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "approximate argument must be either none or tanh.");
  return approximate == "tanh" ? 1.0 : 0.0;
}

at::Tensor gelu(const at::Tensor& self, std::string_view approximate) {
  return pointwise<at::meta::structured_gelu, Variant::Functional>(
      "gelu", Pointwise::Gelu, gelu_kind(approximate), {},
      [&](at::Tensor out) { at::gelu_out(out, host_alias(self), approximate); }, self,
      approximate);
}
// ANCHOR_END: activations

at::Tensor& gelu_(at::Tensor& self, std::string_view approximate) {
  pointwise<at::meta::structured_gelu, Variant::InPlace>(
      "gelu_", Pointwise::Gelu, gelu_kind(approximate), self,
      [&](at::Tensor out) { at::gelu_out(out, out, approximate); }, self, approximate);
  return self;
}

at::Tensor& gelu_out(const at::Tensor& self, std::string_view approximate, at::Tensor& out) {
  pointwise<at::meta::structured_gelu, Variant::Out>(
      "gelu.out", Pointwise::Gelu, gelu_kind(approximate), out,
      [&](at::Tensor o) { at::gelu_out(o, host_alias(self), approximate); }, self, approximate);
  return out;
}

at::Tensor gelu_backward(const at::Tensor& grad, const at::Tensor& self,
                         std::string_view approximate) {
  return pointwise<at::meta::structured_gelu_backward, Variant::Functional>(
      "gelu_backward", Pointwise::GeluBackward, gelu_kind(approximate), {},
      [&](at::Tensor out) {
        at::gelu_backward_out(out, host_alias(grad), host_alias(self), approximate);
      },
      grad, self, approximate);
}

at::Tensor& gelu_backward_out(const at::Tensor& grad, const at::Tensor& self,
                              std::string_view approximate, at::Tensor& out) {
  pointwise<at::meta::structured_gelu_backward, Variant::Out>(
      "gelu_backward.grad_input", Pointwise::GeluBackward, gelu_kind(approximate), out,
      [&](at::Tensor o) {
        at::gelu_backward_out(o, host_alias(grad), host_alias(self), approximate);
      },
      grad, self, approximate);
  return out;
}

at::Tensor silu_backward(const at::Tensor& grad, const at::Tensor& self) {
  return pointwise<at::meta::structured_silu_backward, Variant::Functional>(
      "silu_backward", Pointwise::SiluBackward, 0.0, {},
      [&](at::Tensor out) { at::silu_backward_out(out, host_alias(grad), host_alias(self)); },
      grad, self);
}

at::Tensor& silu_backward_out(const at::Tensor& grad, const at::Tensor& self, at::Tensor& out) {
  pointwise<at::meta::structured_silu_backward, Variant::Out>(
      "silu_backward.grad_input", Pointwise::SiluBackward, 0.0, out,
      [&](at::Tensor o) { at::silu_backward_out(o, host_alias(grad), host_alias(self)); },
      grad, self);
  return out;
}

at::Tensor leaky_relu(const at::Tensor& self, const at::Scalar& slope) {
  return pointwise<at::meta::structured_leaky_relu, Variant::Functional>(
      "leaky_relu", Pointwise::LeakyRelu, to_double(slope), {},
      [&](at::Tensor out) { at::leaky_relu_out(out, host_alias(self), slope); }, self, slope);
}

at::Tensor& leaky_relu_(at::Tensor& self, const at::Scalar& slope) {
  pointwise<at::meta::structured_leaky_relu, Variant::InPlace>(
      "leaky_relu_", Pointwise::LeakyRelu, to_double(slope), self,
      [&](at::Tensor out) { at::leaky_relu_out(out, out, slope); }, self, slope);
  return self;
}

at::Tensor& leaky_relu_out(const at::Tensor& self, const at::Scalar& slope, at::Tensor& out) {
  pointwise<at::meta::structured_leaky_relu, Variant::Out>(
      "leaky_relu.out", Pointwise::LeakyRelu, to_double(slope), out,
      [&](at::Tensor o) { at::leaky_relu_out(o, host_alias(self), slope); }, self, slope);
  return out;
}

// Like threshold_backward, its iterator lists self before grad: no same-shape short way.
at::Tensor leaky_relu_backward(const at::Tensor& grad, const at::Tensor& self,
                               const at::Scalar& slope, bool self_is_result) {
  return pointwise<at::meta::structured_leaky_relu_backward, Variant::Functional, false>(
      "leaky_relu_backward", Pointwise::LeakyReluBackward, to_double(slope), {},
      [&](at::Tensor out) {
        at::leaky_relu_backward_out(out, host_alias(grad), host_alias(self), slope, self_is_result);
      },
      grad, self, slope, self_is_result);
}

at::Tensor& leaky_relu_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                    const at::Scalar& slope, bool self_is_result,
                                    at::Tensor& out) {
  pointwise<at::meta::structured_leaky_relu_backward, Variant::Out, false>(
      "leaky_relu_backward.grad_input", Pointwise::LeakyReluBackward, to_double(slope), out,
      [&](at::Tensor o) {
        at::leaky_relu_backward_out(o, host_alias(grad), host_alias(self), slope, self_is_result);
      },
      grad, self, slope, self_is_result);
  return out;
}

// relu's backward. Its iterator lists self before grad, the reverse of the arguments, so it
// skips the same-shape short way (which takes tensors in argument order).
at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& self,
                              const at::Scalar& threshold) {
  return pointwise<at::meta::structured_threshold_backward, Variant::Functional, false>(
      "threshold_backward", Pointwise::ThresholdBackward, to_double(threshold), {},
      [&](at::Tensor out) {
        at::threshold_backward_out(out, host_alias(grad), host_alias(self), threshold);
      },
      grad, self, threshold);
}

at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                   const at::Scalar& threshold, at::Tensor& out) {
  pointwise<at::meta::structured_threshold_backward, Variant::Out, false>(
      "threshold_backward.grad_input", Pointwise::ThresholdBackward, to_double(threshold), out,
      [&](at::Tensor o) {
        at::threshold_backward_out(o, host_alias(grad), host_alias(self), threshold);
      },
      grad, self, threshold);
  return out;
}

// relu is not structured: a unary TensorIterator of our own gives it the same treatment.
at::Tensor& relu_into(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  auto iter = at::TensorIterator::unary_op(out, self);
  if (!run_pointwise(iter, Pointwise::Relu)) {
    on_host("relu", self.scalar_type(), [&] {
      at::Tensor host = host_alias(iter.output(0));
      host.copy_(at::relu(host_alias(self)));
    });
  }
  if (!out.defined()) {
    out = iter.output(0);
  }
  return out;
}

at::Tensor relu(const at::Tensor& self) {
  at::Tensor out;
  if (same_shape<Variant::Functional>(Pointwise::Relu, 0.0, {}, out, self)) {
    return out;
  }
  return relu_into(self, out);
}

at::Tensor& relu_(at::Tensor& self) {
  at::Tensor out;
  if (same_shape<Variant::InPlace>(Pointwise::Relu, 0.0, self, out, self)) {
    return self;
  }
  return relu_into(self, self);
}

// ANCHOR: fill
// fill_ converts the value as CPU does, so an out-of-range value is the same error.
at::Tensor& fill_scalar_(at::Tensor& self, const at::Scalar& value) {
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .add_output(self)
                  .resize_outputs(false)
                  .build();
  std::optional<double> v;
  switch (self.scalar_type()) {
    case at::kFloat: v = value.to<float>(); break;
    case at::kHalf: v = static_cast<float>(value.to<c10::Half>()); break;
    case at::kBFloat16: v = static_cast<float>(value.to<c10::BFloat16>()); break;
    case at::kBool: v = value.to<bool>() ? 1.0 : 0.0; break;
    default: break;
  }
  // Integers (masks, positions) are filled by a kernel of their own when the tensor is
  // contiguous; the value is converted, and range-checked, as CPU converts it.
  std::optional<int64_t> integer;
  switch (self.scalar_type()) {
    case at::kByte: integer = value.to<uint8_t>(); break;
    case at::kChar: integer = value.to<int8_t>(); break;
    case at::kShort: integer = value.to<int16_t>(); break;
    case at::kInt: integer = value.to<int32_t>(); break;
    case at::kLong: integer = value.to<int64_t>(); break;
    default: break;
  }
  if (integer && self.is_contiguous() &&
      call([&] { return launch_fill_int(dense(self), *integer, self.device().index()); })) {
    return self;
  }
  // A strided integer tensor: the elementwise kernels' exact integer path (for values float64
  // holds exactly; others take CPU's kernel).
  if (integer) {
    v = static_cast<double>(*integer);
  }
  if (!v || !run_pointwise(iter, Pointwise::Fill, *v)) {
    on_host("fill_", self.scalar_type(), [&] {
      host_alias(self).fill_(value);
    });
  }
  return self;
}
// ANCHOR_END: fill

at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return fill_scalar_(self, value.item());
}

at::Tensor& zero_(at::Tensor& self) {
  return fill_scalar_(self, 0);
}

} // namespace

// ANCHOR: register_pointwise
void register_pointwise_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("add.Tensor", TORCH_FN(add));
    library.impl("add_.Tensor", TORCH_FN(add_));
    library.impl("add.out", TORCH_FN(add_out));
    library.impl("sub.Tensor", TORCH_FN(sub));
    library.impl("sub_.Tensor", TORCH_FN(sub_));
    library.impl("sub.out", TORCH_FN(sub_out));
    library.impl("mul.Tensor", TORCH_FN(mul));
    library.impl("mul_.Tensor", TORCH_FN(mul_));
    library.impl("mul.out", TORCH_FN(mul_out));
    library.impl("div.Tensor", TORCH_FN(div));
    library.impl("div_.Tensor", TORCH_FN(div_));
    library.impl("div.out", TORCH_FN(div_out));
    library.impl("div.Tensor_mode", TORCH_FN(div_tensor_mode));
    library.impl("div_.Tensor_mode", TORCH_FN(div__tensor_mode));
    library.impl("div.out_mode", TORCH_FN(div_out_mode));
    library.impl("floor_divide", TORCH_FN(floor_divide));
    library.impl("floor_divide_.Tensor", TORCH_FN(floor_divide_));
    library.impl("floor_divide.out", TORCH_FN(floor_divide_out));
    // ANCHOR_END: register_pointwise
    library.impl("neg", TORCH_FN(neg));
    library.impl("neg_", TORCH_FN(neg_));
    library.impl("neg.out", TORCH_FN(neg_out));
    library.impl("exp", TORCH_FN(exp));
    library.impl("exp_", TORCH_FN(exp_));
    library.impl("exp.out", TORCH_FN(exp_out));
    library.impl("sigmoid", TORCH_FN(sigmoid));
    library.impl("sigmoid_", TORCH_FN(sigmoid_));
    library.impl("sigmoid.out", TORCH_FN(sigmoid_out));
    library.impl("tanh", TORCH_FN(tanh));
    library.impl("tanh_", TORCH_FN(tanh_));
    library.impl("tanh.out", TORCH_FN(tanh_out));
    library.impl("silu", TORCH_FN(silu));
    library.impl("silu_", TORCH_FN(silu_));
    library.impl("silu.out", TORCH_FN(silu_out));
    library.impl("sqrt", TORCH_FN(sqrt));
    library.impl("sqrt_", TORCH_FN(sqrt_));
    library.impl("sqrt.out", TORCH_FN(sqrt_out));
    library.impl("log", TORCH_FN(log));
    library.impl("log_", TORCH_FN(log_));
    library.impl("log.out", TORCH_FN(log_out));
    library.impl("reciprocal", TORCH_FN(reciprocal));
    library.impl("reciprocal_", TORCH_FN(reciprocal_));
    library.impl("reciprocal.out", TORCH_FN(reciprocal_out));
    library.impl("silu_backward", TORCH_FN(silu_backward));
    library.impl("silu_backward.grad_input", TORCH_FN(silu_backward_out));
    library.impl("gelu", TORCH_FN(gelu));
    library.impl("gelu_", TORCH_FN(gelu_));
    library.impl("gelu.out", TORCH_FN(gelu_out));
    library.impl("gelu_backward", TORCH_FN(gelu_backward));
    library.impl("gelu_backward.grad_input", TORCH_FN(gelu_backward_out));
    library.impl("leaky_relu", TORCH_FN(leaky_relu));
    library.impl("leaky_relu_", TORCH_FN(leaky_relu_));
    library.impl("leaky_relu.out", TORCH_FN(leaky_relu_out));
    library.impl("leaky_relu_backward", TORCH_FN(leaky_relu_backward));
    library.impl("leaky_relu_backward.grad_input", TORCH_FN(leaky_relu_backward_out));
    library.impl("relu", TORCH_FN(relu));
    library.impl("relu_", TORCH_FN(relu_));
    library.impl("threshold_backward", TORCH_FN(threshold_backward));
    library.impl("threshold_backward.grad_input", TORCH_FN(threshold_backward_out));
    library.impl("fill_.Scalar", TORCH_FN(fill_scalar_));
    library.impl("fill_.Tensor", TORCH_FN(fill_tensor_));
    library.impl("zero_", TORCH_FN(zero_));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
