#pragma once
// Structured kernels, the way PyTorch's generated Register<Backend>.cpp wraps them: the
// operator's `meta` function (shapes, broadcasting, type promotion, error messages, shared with
// CPU and CUDA) asks for its outputs through set_output_raw_strided; we answer with a new
// tensor (functional), the input itself (in-place) or the user's `out=` tensor, resized.
// Our code then only has to compute.

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/op_registration/adaption.h>

#include <array>
#include <functional>
#include <optional>
#include <type_traits>

namespace openreg {

// Minimal.cpp: a new openreg tensor (contiguous when `strides` is empty), and an `out=`
// tensor checked and resized as PyTorch's generated code does it.
at::Tensor create_out(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      const c10::TensorOptions& options);
void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                const c10::TensorOptions& options);

// ANCHOR: structured
enum class Variant { Functional, InPlace, Out };

template <class Meta, Variant kind>
struct Structured final : Meta {
  // `given`: the tensors an in-place or out= call writes to (undefined for functional calls).
  explicit Structured(const at::Tensor& given = {}, const at::Tensor& given1 = {})
      : given_{given, given1} {}

  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    set_output(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    set_output(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    return proxy_[i] ? *proxy_[i] : (kind == Variant::Functional ? output_[i] : given_[i]);
  }

  // Output `i`: the new tensor, or the given one after copying back a proxy (an output whose
  // strides differ from the ones the meta function asked for).
  at::Tensor result(int64_t i = 0) {
    if (proxy_[i]) {
      given_[i].copy_(*proxy_[i]);
    }
    return kind == Variant::Functional ? std::move(output_[i]) : given_[i];
  }

 private:
  void set_output(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                  c10::TensorOptions options) {
    TORCH_INTERNAL_ASSERT(i < 2, "openreg structured kernels have at most two outputs");
    if constexpr (kind == Variant::Functional) {
      output_[i] = create_out(sizes, strides, options);
    } else {
      if constexpr (kind == Variant::InPlace) {
        check_inplace(given_[i], sizes, options);
      } else {
        resize_out(given_[i], sizes, strides, options);
      }
      if (!strides.empty() && given_[i].strides() != strides) {
        proxy_[i] = create_out(sizes, strides, options);
      }
    }
    // TensorIterator-based metas record the output in the iterator too.
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) {
      Meta::set_output_raw_strided(i, sizes, strides, options);
    }
  }

  static void check_inplace(const at::Tensor& given, c10::IntArrayRef sizes,
                            const c10::TensorOptions& options) {
    TORCH_CHECK(options.dtype() == given.dtype(), "Bad in-place call: input tensor dtype ",
                given.dtype(), " and output tensor dtype ", options.dtype(), " should match");
    TORCH_CHECK(options.device() == given.device(), "Bad in-place call: input tensor device ",
                given.device(), " and output tensor device ", options.device(), " should match");
    TORCH_CHECK(sizes == given.sizes(), "Bad in-place call: input tensor size ",
                given.sizes(), " and output tensor size ", sizes, " should match");
  }

  std::array<at::Tensor, 2> given_;
  std::array<at::Tensor, 2> output_;
  std::array<std::optional<at::Tensor>, 2> proxy_;
};
// ANCHOR_END: structured

// ANCHOR: launch
// Runs a TensorIterator's operands through a Rust elementwise kernel on the current stream.
// Returns false, having done nothing, when the kernel does not handle the dtypes.
bool run_pointwise(at::TensorIteratorBase& iter, Pointwise op, double scalar = 0.0);
// ANCHOR_END: launch

// A contiguous tensor as the Rust kernels take it (address 0 for an undefined tensor).
inline Dense dense(const at::Tensor& t) {
  if (!t.defined()) {
    return Dense{0, 0, 0, 0, 0};
  }
  return Dense{addr(t.const_data_ptr()), addr(t.storage().data()), t.storage().nbytes(),
               static_cast<size_t>(t.numel()), static_cast<int8_t>(t.scalar_type())};
}

// Metas that are not TensorIterator-based do not compare devices; PyTorch's generated wrappers
// check them first, with this helper and message. Absent (null) and undefined tensors are
// skipped.
inline void check_devices(
    const char* method, std::initializer_list<std::pair<const char*, const at::Tensor*>> args) {
  std::optional<c10::Device> common;
  for (const auto& [name, t] : args) {
    if (t != nullptr) {
      c10::impl::check_and_update_common_device(common, *t, method, name);
    }
  }
}

// Counts a run of an operator on the host instead of in a kernel (Fallback.cpp).
void note_host_path(const char* op, c10::ScalarType dtype);
bool warn_fallback();

// ANCHOR: pointwise
// One structured elementwise operator call: meta, then the Rust kernel, or else the host path
// (`host` runs the CPU kernel given a CPU alias of the output).
template <class Meta, Variant kind, class Host, class... Args>
at::Tensor pointwise(const char* name, Pointwise op, double scalar, const at::Tensor& given,
                     Host&& host, const Args&... args) {
  Structured<Meta, kind> s(given);
  s.meta(args...);
  if (!run_pointwise(s, op, scalar)) {
    note_host_path(name, s.common_dtype());
    host(host_alias(s.maybe_get_output(0)));
  }
  return s.result();
}
// ANCHOR_END: pointwise


} // namespace openreg
