// Kernels for add and mul: the structured meta functions decide shapes, dtypes and errors;
// the Rust kernels compute float32 on the device. Everything else (other dtypes, a CPU
// scalar operand) goes to the CPU fallback, which copies operands to the host and results
// back: host code never reads device memory.

#include "Fallback.h"
#include "Structured.h"

#include <ATen/ops/add_meta.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/result_type.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: run
// A binary kernel of src/kernels.rs, as cxx declares it.
using BinaryKernel = void (*)(float alpha, rust::Slice<const size_t> data, rust::Slice<const int64_t> shape,
                              rust::Slice<const int64_t> strides);

// What the Rust kernels take: float32 tensors on an openreg device.
bool float32_on_device(std::initializer_list<at::Tensor> tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return !t.defined() || (t.scalar_type() == at::kFloat && t.device().type() == kOpenReg);
  });
}

// A CPU scalar (`x * 3`, `x + torch.tensor(0.5)`) is a value, not memory: when the result is
// float32 it travels to the device as a one-element tensor, and the kernel broadcasts it.
at::Tensor on_device(const at::Tensor& other, const at::Tensor& self) {
  if (other.is_cpu() && other.dim() == 0 && self.device().type() == kOpenReg &&
      at::result_type(self, other) == at::kFloat) {
    return other.to(self.options().dtype(at::kFloat));
  }
  return other;
}

// The meta function lays out the iteration (and the output); the kernel runs over it with
// device addresses, which only the kernel dereferences.
template <class Meta, Variant kind>
at::Tensor binary(BinaryKernel kernel, const at::Tensor& self, const at::Tensor& other,
                  const at::Scalar& alpha, const at::Tensor& given) {
  Structured<Meta, kind> s(given);
  if constexpr (std::is_same_v<Meta, at::meta::structured_add_Tensor>) {
    s.meta(self, other, alpha);
  } else {
    s.meta(self, other);
  }
  std::array<size_t, 3> data{};
  c10::SmallVector<int64_t, 12> strides;
  for (int k = 0; k < 3; ++k) {
    data[k] = reinterpret_cast<size_t>(s.data_ptr(k));
    strides.append(s.strides(k).begin(), s.strides(k).end());
  }
  call([&] {
    kernel(alpha.toFloat(), {data.data(), 3}, {s.shape().data(), s.shape().size()},
           {strides.data(), strides.size()});
  });
  return s.given_;
}
// ANCHOR_END: run

// ANCHOR: add
at::Tensor add(const at::Tensor& self, const at::Tensor& scalar_or_other, const at::Scalar& alpha) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other}) || alpha.isComplex()) {
    return fall_back<at::_ops::add_Tensor>(self, other, alpha);
  }
  return binary<at::meta::structured_add_Tensor, Variant::Functional>(add_f32, self, other, alpha, {});
}
// ANCHOR_END: add

at::Tensor& add_(at::Tensor& self, const at::Tensor& scalar_or_other, const at::Scalar& alpha) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other}) || alpha.isComplex()) {
    return fall_back<at::_ops::add__Tensor>(self, other, alpha);
  }
  binary<at::meta::structured_add_Tensor, Variant::InPlace>(add_f32, self, other, alpha, self);
  return self;
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& scalar_or_other, const at::Scalar& alpha,
                    at::Tensor& out) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other, out}) || alpha.isComplex()) {
    return fall_back<at::_ops::add_out>(self, other, alpha, out);
  }
  binary<at::meta::structured_add_Tensor, Variant::Out>(add_f32, self, other, alpha, out);
  return out;
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& scalar_or_other) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other})) {
    return fall_back<at::_ops::mul_Tensor>(self, other);
  }
  return binary<at::meta::structured_mul_Tensor, Variant::Functional>(mul_f32, self, other, 1, {});
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& scalar_or_other) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other})) {
    return fall_back<at::_ops::mul__Tensor>(self, other);
  }
  binary<at::meta::structured_mul_Tensor, Variant::InPlace>(mul_f32, self, other, 1, self);
  return self;
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& scalar_or_other, at::Tensor& out) {
  const at::Tensor other = on_device(scalar_or_other, self);
  if (!float32_on_device({self, other, out})) {
    return fall_back<at::_ops::mul_out>(self, other, out);
  }
  binary<at::meta::structured_mul_Tensor, Variant::Out>(mul_f32, self, other, 1, out);
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
