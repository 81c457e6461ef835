// Kernels for add and mul: the structured meta functions decide shapes, dtypes and errors;
// the Rust kernel computes float32, and ATen's CPU kernel the other dtypes (device memory
// is host memory at this stage, so the CPU kernel can run on it directly).

#include "Structured.h"

#include <ATen/ops/add.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/mul_meta.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

namespace openreg {
namespace {

// A CPU tensor over the same memory (CPU scalars pass through).
at::Tensor host(const at::Tensor& t) {
  return t.is_cpu() ? t : at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// ANCHOR: run
// A binary kernel of src/kernels.rs, as cxx declares it.
using BinaryKernel = void (*)(float alpha, rust::Slice<const size_t> data, rust::Slice<const int64_t> shape,
                              rust::Slice<const int64_t> strides);

// The Rust kernel takes float32 tensors on the device; false if this iterator is not that.
bool run_binary(at::TensorIteratorBase& iter, BinaryKernel kernel, float alpha) {
  for (int k = 0; k < iter.ntensors(); ++k) {
    if (iter.dtype(k) != at::kFloat || iter.device(k).type() != kOpenReg) {
      return false;
    }
  }
  std::array<size_t, 3> data{};
  c10::SmallVector<int64_t, 12> strides;
  for (int k = 0; k < 3; ++k) {
    data[k] = reinterpret_cast<size_t>(iter.data_ptr(k));
    strides.append(iter.strides(k).begin(), iter.strides(k).end());
  }
  kernel(alpha, {data.data(), 3}, {iter.shape().data(), iter.shape().size()},
             {strides.data(), strides.size()});
  return true;
}

template <class Meta, Variant kind, class Cpu>
at::Tensor binary(BinaryKernel kernel, const at::Tensor& self, const at::Tensor& other,
                  const at::Scalar& alpha, const at::Tensor& given, Cpu&& cpu) {
  Structured<Meta, kind> s(given);
  if constexpr (std::is_same_v<Meta, at::meta::structured_add_Tensor>) {
    s.meta(self, other, alpha);
  } else {
    s.meta(self, other);
  }
  if (!run_binary(s, kernel, alpha.isComplex() ? 0.0f : alpha.toFloat())) {
    at::Tensor out = host(s.given_);
    cpu(out, host(self), host(other));
  }
  return s.given_;
}
// ANCHOR_END: run

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary<at::meta::structured_add_Tensor, Variant::Functional>(
      add_f32, self, other, alpha, {},
      [&](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::add_out(o, a, b, alpha); });
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  binary<at::meta::structured_add_Tensor, Variant::InPlace>(
      add_f32, self, other, alpha, self,
      [&](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::add_out(o, a, b, alpha); });
  return self;
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  binary<at::meta::structured_add_Tensor, Variant::Out>(
      add_f32, self, other, alpha, out,
      [&](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::add_out(o, a, b, alpha); });
  return out;
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  return binary<at::meta::structured_mul_Tensor, Variant::Functional>(
      mul_f32, self, other, 1, {},
      [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::mul_out(o, a, b); });
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
  binary<at::meta::structured_mul_Tensor, Variant::InPlace>(
      mul_f32, self, other, 1, self,
      [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::mul_out(o, a, b); });
  return self;
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  binary<at::meta::structured_mul_Tensor, Variant::Out>(
      mul_f32, self, other, 1, out,
      [](at::Tensor& o, const at::Tensor& a, const at::Tensor& b) { at::mul_out(o, a, b); });
  return out;
}

} // namespace

// ANCHOR: register_kernels
void register_kernels() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("add.Tensor", TORCH_FN(add));
    library.impl("add_.Tensor", TORCH_FN(add_));
    library.impl("add.out", TORCH_FN(add_out));
    library.impl("mul.Tensor", TORCH_FN(mul));
    library.impl("mul_.Tensor", TORCH_FN(mul_));
    library.impl("mul.out", TORCH_FN(mul_out));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_kernels

} // namespace openreg
