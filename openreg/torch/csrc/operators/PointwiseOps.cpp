// The elementwise operators optimizers and bounded activations are made of: addcmul, addcdiv
// and lerp (Adam's moments and update), hardtanh and its backward (ReLU6 too), each through the
// Rust elementwise kernel like Pointwise.cpp's. addcmul and addcdiv read three tensors.

#include "operators/Structured.h"

#include <ATen/ops/addcdiv.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/hardtanh_backward.h>
#include <ATen/ops/lerp.h>
#include <ATen/ops/lerp_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

double real(const at::Scalar& s) {
  return s.isComplex() ? 0.0 : s.toDouble();
}

// ANCHOR: addcmul
// self + value * tensor1 * tensor2 (addcmul), self + value * tensor1 / tensor2 (addcdiv).
#define OPENREG_ADDC(name, kernel)                                                              \
  at::Tensor name(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,          \
                  const at::Scalar& value) {                                                    \
    return pointwise<at::meta::structured_##name, Variant::Functional>(                        \
        #name, Pointwise::kernel, real(value), {},                                              \
        [&](at::Tensor out) {                                                                   \
          at::name##_out(out, host_alias(self), host_alias(t1), host_alias(t2), value);         \
        },                                                                                      \
        self, t1, t2, value);                                                                   \
  }                                                                                             \
  at::Tensor& name##_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,            \
                      const at::Scalar& value) {                                                \
    pointwise<at::meta::structured_##name, Variant::InPlace>(                                  \
        #name "_", Pointwise::kernel, real(value), self,                                        \
        [&](at::Tensor out) { at::name##_out(out, out, host_alias(t1), host_alias(t2), value); }, \
        self, t1, t2, value);                                                                   \
    return self;                                                                                \
  }                                                                                             \
  at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,   \
                         const at::Scalar& value, at::Tensor& out) {                            \
    pointwise<at::meta::structured_##name, Variant::Out>(                                      \
        #name ".out", Pointwise::kernel, real(value), out,                                      \
        [&](at::Tensor o) {                                                                     \
          at::name##_out(o, host_alias(self), host_alias(t1), host_alias(t2), value);           \
        },                                                                                      \
        self, t1, t2, value);                                                                   \
    return out;                                                                                 \
  }

OPENREG_ADDC(addcmul, Addcmul)
OPENREG_ADDC(addcdiv, Addcdiv)
// ANCHOR_END: addcmul

// lerp with a scalar weight: self + weight * (end - self).
at::Tensor lerp(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  return pointwise<at::meta::structured_lerp_Scalar, Variant::Functional>(
      "lerp", Pointwise::Lerp, real(weight), {},
      [&](at::Tensor out) { at::lerp_out(out, host_alias(self), host_alias(end), weight); },
      self, end, weight);
}
at::Tensor& lerp_(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  pointwise<at::meta::structured_lerp_Scalar, Variant::InPlace>(
      "lerp_", Pointwise::Lerp, real(weight), self,
      [&](at::Tensor out) { at::lerp_out(out, out, host_alias(end), weight); }, self, end, weight);
  return self;
}
at::Tensor& lerp_out(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
                     at::Tensor& out) {
  pointwise<at::meta::structured_lerp_Scalar, Variant::Out>(
      "lerp.out", Pointwise::Lerp, real(weight), out,
      [&](at::Tensor o) { at::lerp_out(o, host_alias(self), host_alias(end), weight); }, self,
      end, weight);
  return out;
}

// ANCHOR: hardtanh
// hardtanh is not structured (CPU's is a clamp): a TensorIterator of our own, with both
// bounds as the kernel's scalars. `out` undefined: the iterator allocates the result.
at::Tensor hardtanh_into(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max,
                         at::Tensor out) {
  auto iter = at::TensorIterator::unary_op(out, self);
  if (!run_pointwise(iter, Pointwise::Hardtanh, real(min), real(max))) {
    on_host("hardtanh", self.scalar_type(), [&] {
      at::Tensor host = host_alias(iter.output(0));
      at::hardtanh_out(host, host_alias(self), min, max);
    });
  }
  return iter.output(0);
}
// ANCHOR_END: hardtanh

at::Tensor hardtanh(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  return hardtanh_into(self, min, max, at::Tensor());
}
at::Tensor& hardtanh_(at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  hardtanh_into(self, min, max, self);
  return self;
}
at::Tensor& hardtanh_out(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max,
                         at::Tensor& out) {
  hardtanh_into(self, min, max, out);
  return out;
}

// The gradient where min < self < max, zero elsewhere; the iterator lists (grad, self).
at::Tensor hardtanh_backward_into(const at::Tensor& grad, const at::Tensor& self,
                                  const at::Scalar& min, const at::Scalar& max, at::Tensor out) {
  auto iter = at::TensorIterator::binary_op(out, grad, self);
  if (!run_pointwise(iter, Pointwise::HardtanhBackward, real(min), real(max))) {
    on_host("hardtanh_backward", self.scalar_type(), [&] {
      at::Tensor host = host_alias(iter.output(0));
      at::hardtanh_backward_out(host, host_alias(grad), host_alias(self), min, max);
    });
  }
  return iter.output(0);
}
at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& self,
                             const at::Scalar& min, const at::Scalar& max) {
  return hardtanh_backward_into(grad, self, min, max, at::Tensor());
}
at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                  const at::Scalar& min, const at::Scalar& max, at::Tensor& out) {
  hardtanh_backward_into(grad, self, min, max, out);
  return out;
}

} // namespace

void register_compound_pointwise() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("addcmul", TORCH_FN(addcmul));
    library.impl("addcmul_", TORCH_FN(addcmul_));
    library.impl("addcmul.out", TORCH_FN(addcmul_out));
    library.impl("addcdiv", TORCH_FN(addcdiv));
    library.impl("addcdiv_", TORCH_FN(addcdiv_));
    library.impl("addcdiv.out", TORCH_FN(addcdiv_out));
    library.impl("lerp.Scalar", TORCH_FN(lerp));
    library.impl("lerp_.Scalar", TORCH_FN(lerp_));
    library.impl("lerp.Scalar_out", TORCH_FN(lerp_out));
    library.impl("hardtanh", TORCH_FN(hardtanh));
    library.impl("hardtanh_", TORCH_FN(hardtanh_));
    library.impl("hardtanh.out", TORCH_FN(hardtanh_out));
    library.impl("hardtanh_backward", TORCH_FN(hardtanh_backward));
    library.impl("hardtanh_backward.grad_input", TORCH_FN(hardtanh_backward_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
