#pragma once
// Structured kernels, the way PyTorch's generated Register<Backend>.cpp wraps them: the
// operator's `meta` function (shapes, broadcasting, type promotion, error messages, shared with
// CPU and CUDA) asks for its outputs through set_output_raw_strided; we answer with a new
// tensor (functional), the input itself (in-place) or the user's `out=` tensor, resized.
// Our code then only has to compute.

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/op_registration/adaption.h>
#include <c10/util/accumulate.h>

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
bool run_pointwise(at::TensorIteratorBase& iter, Pointwise op, double scalar = 0.0,
                   double scalar2 = 0.0);
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

// ANCHOR: check_overlap
// CPU's TensorIterator refuses an output whose elements share memory, and an output that
// partly overlaps an input (whole overlap is an in-place call). A kernel that writes its output
// without an iterator makes the same checks, with ATen's functions and so CPU's messages.
inline void check_overlap(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs) {
  at::assert_no_internal_overlap(out);
  for (const at::Tensor* t : inputs) {
    if (t != nullptr && t->defined()) {
      at::assert_no_partial_overlap(out, *t);
    }
  }
}
// ANCHOR_END: check_overlap

// Counts a run of an operator on the host instead of in a kernel (Fallback.cpp).
void note_host_path(const char* op, c10::ScalarType dtype);
bool warn_fallback();

// ANCHOR: on_host
// A kernel's host path: ATen's CPU kernel over the runtime's view of the operands, for a dtype
// our kernels do not compute in; counted. A dtype CPU's kernel lacks too is reported as
// openreg's, not as a CPU kernel's ("exp_vml_cpu" not implemented for 'ComplexHalf').
template <class F>
decltype(auto) on_host(const char* op, c10::ScalarType dtype, F&& run) {
  note_host_path(op, dtype);
  try {
    return run();
  } catch (const c10::NotImplementedError& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "openreg has no kernel for aten::", op, " in ", dtype,
                                ", and CPU's kernel, which runs in its place, has none either: ",
                                e.what_without_backtrace());
  }
}
// ANCHOR_END: on_host

// ANCHOR: broadcast_inner
// Whether `part` broadcasts against `full` in one block: `full`'s shape with dimensions of size 1
// before and after a span it shares (a bias [n] against [.., n], a row's scale [.., 1], a
// channel's [1, c, 1, 1]). Then output element i reads part[(i / inner) % part.numel()];
// returns `inner`, the elements that read one element of `part` in a row (1: `part` is read
// whole, once per row of its size), or 0 for any other shape, or rows too short to be worth it.
inline int64_t broadcast_inner(at::IntArrayRef full, at::IntArrayRef part) {
  if (part.size() > full.size()) {
    return 0;
  }
  const size_t lead = full.size() - part.size();
  auto size = [&](size_t d) { return d < lead ? 1 : part[d - lead]; };  // `part` aligned right
  size_t d = 0;
  while (d < full.size() && size(d) == 1) {
    ++d;
  }
  size_t end = d;
  while (end < full.size() && size(end) == full[end]) {
    ++end;
  }
  int64_t inner = 1;
  for (size_t k = end; k < full.size(); ++k) {
    if (size(k) != 1) {
      return 0;
    }
    inner *= full[k];
  }
  const int64_t period = c10::multiply_integers(part);
  if (period == 1) {
    inner = c10::multiply_integers(full);  // one element for all: a single row
  }
  return (inner == 1 ? period : inner) >= 16 ? inner : 0;
}
// ANCHOR_END: broadcast_inner

// ANCHOR: same_shape
// The common cases, recognised without TensorIterator: contiguous float32 tensors on one
// device, with real scalars, of one shape or with one of two inputs broadcast in one block
// (`broadcast_inner`). TensorIterator would give them a contiguous float32 output of the full
// shape and a run of memory each, but finding that out costs it more than adding two 3x3
// tensors. Anything else (other broadcasts, dtypes or layouts, an in-place input that overlaps
// self, out=) takes the general path, errors included. The tensors are taken in argument
// order, which must be the kernel's order. True when launched.
template <Variant kind, class... Args>
bool same_shape(Pointwise op, double scalar, const at::Tensor& given, at::Tensor& result,
                const Args&... args) {
  static_assert(kind != Variant::Out, "out= tensors take the general path");
  std::array<const at::Tensor*, 2> in{};
  size_t n = 0;
  bool simple = true;
  auto check = [&](const auto& arg) {
    using T = std::decay_t<decltype(arg)>;
    if constexpr (std::is_same_v<T, at::Tensor>) {
      simple = simple && n < in.size() && arg.defined() && arg.is_privateuseone() &&
               arg.scalar_type() == at::kFloat && arg.is_contiguous() && !arg.is_neg() &&
               (n == 0 || arg.device() == in[0]->device());
      if (simple) {
        in[n++] = &arg;
      }
    } else if constexpr (std::is_same_v<T, c10::Scalar>) {
      // A bool or complex alpha is an error the meta function reports.
      simple = simple && (arg.isFloatingPoint() || arg.isIntegral(/*includeBool=*/false));
    } else {
      simple = false;
    }
  };
  (check(args), ...);
  if (!simple || n == 0) {
    return false;
  }
  const at::Tensor& self = *in[0];
  // The input of the output's shape (`full`) and, if the other is broadcast, the other.
  const at::Tensor* full = &self;
  const at::Tensor* part = nullptr;
  int64_t inner = 0;
  if (n > 1 && in[1]->sizes() != self.sizes()) {
    if (self.numel() > 0 && (inner = broadcast_inner(self.sizes(), in[1]->sizes())) > 0) {
      part = in[1];
    } else if (kind != Variant::InPlace && in[1]->numel() > 0 &&
               (inner = broadcast_inner(in[1]->sizes(), self.sizes())) > 0) {
      full = in[1];
      part = &self;
    } else {
      return false;
    }
  }
  if constexpr (kind == Variant::InPlace) {
    // x.add_(x) is fine; an input that overlaps self only partly is TensorIterator's error.
    if (!given.is_same(self) ||
        (n > 1 && in[1]->is_alias_of(self) &&
         (part != nullptr || in[1]->const_data_ptr() != self.const_data_ptr()))) {
      return false;
    }
    result = given;
  } else {
    result = create_out(full->sizes(), {}, full->options());
  }
  const bool launched = call([&] {
    if (part != nullptr) {
      return launch_broadcast(op, scalar, dense(result), dense(*full), dense(*part),
                              /*part_first=*/part == &self, static_cast<size_t>(inner),
                              self.device().index());
    }
    return launch_same_shape(op, scalar, dense(result), dense(self), dense(n > 1 ? *in[1] : self),
                             self.device().index());
  });
  if (!launched) {
    result = at::Tensor();
  }
  return launched;
}
// ANCHOR_END: same_shape

// ANCHOR: pointwise
// One structured elementwise operator call: the short way above if it applies; else meta,
// then the Rust kernel, or else the host path (`host` runs the CPU kernel given a CPU alias of
// the output). `Ordered`: the meta function's tensor arguments come in its iterator's order.
template <class Meta, Variant kind, bool Ordered = true, class Host, class... Args>
at::Tensor pointwise(const char* name, Pointwise op, double scalar, const at::Tensor& given,
                     Host&& host, const Args&... args) {
  if constexpr (Ordered && kind != Variant::Out) {
    at::Tensor result;
    if (same_shape<kind>(op, scalar, given, result, args...)) {
      return result;
    }
  }
  Structured<Meta, kind> s(given);
  s.meta(args...);
  if (!run_pointwise(s, op, scalar)) {
    on_host(name, s.common_dtype(), [&] {
      host(host_alias(s.maybe_get_output(0)));
    });
  }
  return s.result();
}
// ANCHOR_END: pointwise


} // namespace openreg
