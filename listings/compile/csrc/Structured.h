#pragma once
// Structured kernels, as PyTorch's generated code wraps them: the operator's `meta` function
// (shapes, broadcasting, type promotion, errors, the same as on CPU) asks for its output
// through set_output_raw_strided; we answer with a new tensor (functional), the input
// (in-place) or the user's `out=` tensor, resized. The kernel then only computes.

#include "OpenReg.h"

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>

namespace openreg {

enum class Variant { Functional, InPlace, Out };

// ANCHOR: structured
template <class Meta, Variant kind>
struct Structured final : Meta {
  // `given`: the tensor an in-place or out= call writes to (undefined for functional calls).
  explicit Structured(const at::Tensor& given = {}) : given_(given) {}

  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    if constexpr (kind == Variant::Functional) {
      const c10::DeviceGuard guard(options.device());
      given_ = strides.empty()
                   ? at::detail::empty_generic(sizes, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                               c10::typeMetaToScalarType(options.dtype()), std::nullopt)
                   : at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                                       c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                       c10::typeMetaToScalarType(options.dtype()));
    } else if constexpr (kind == Variant::Out) {
      TORCH_CHECK(options.dtype() == given_.dtype(), "Expected out tensor to have dtype ",
                  options.dtype(), ", but got ", given_.dtype(), " instead");
      TORCH_CHECK(options.device() == given_.device(), "Expected out tensor to have device ",
                  options.device(), ", but got ", given_.device(), " instead");
      // A resized out= tensor must take the strides the meta function asked for: a
      // TensorIterator has already laid its loops out for them (for transposed inputs they are
      // not contiguous), and writes through them.
      if (at::native::resize_output(given_, sizes) && !strides.empty()) {
        given_.as_strided_(sizes, strides);
      }
    }
    // (In place: the iterator has checked that the input can hold the result.)
    Meta::set_output_raw_strided(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t) override { return given_; }

  at::Tensor given_;
};
// ANCHOR_END: structured

} // namespace openreg
