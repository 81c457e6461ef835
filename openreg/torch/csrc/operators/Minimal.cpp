// The minimal set of operators every PrivateUse1 backend registers: tensor creation, views,
// resizing, copies and reading one scalar. Everything else can go through the fallback.

#include "operators/Structured.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

namespace openreg {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

void check_options(const c10::Device& device, std::optional<c10::Layout> layout,
                   std::optional<bool> pin_memory) {
  TORCH_CHECK(device.is_privateuseone(), "expected an openreg device, got ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "openreg supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "only CPU tensors can be pinned; openreg tensors live in device memory");
}

// ANCHOR: empty
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device_opt,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const auto device = c10::device_or_default(device_opt);
  check_options(device, layout, pin_memory);
  // The allocator allocates on the current device: make it the requested one.
  const c10::DeviceGuard guard(device);
  return at::detail::empty_generic(size, device_allocator(), kKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}
// ANCHOR_END: empty

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device_opt, std::optional<bool> pin_memory) {
  const auto device = c10::device_or_default(device_opt);
  check_options(device, layout, pin_memory);
  const c10::DeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys,
                                           c10::dtype_or_default(dtype));
}

// Views only change metadata, so ATen's generic implementations are correct for any device.
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) {
    offset = storage_offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// The IntArrayRef kernels, as CPU registers: real tensors have concrete sizes, and the SymInt
// versions cost a view 40% more.
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

// ANCHOR: resize
// Makes the storage large enough for the tensor's sizes, strides and offset. ATen's CPU
// helpers would grow it with a host memcpy; ours copies device to device.
void ensure_storage(const at::Tensor& self) {
  if (self.numel() == 0) {
    return;
  }
  const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                         self.itemsize(), self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage(), needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, C10_AS_INTARRAYREF_SLOW(size), std::nullopt,
                               /*resize_storage=*/false);
  if (memory_format) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(self);
  return self;
}
// ANCHOR_END: resize

at::Tensor& set_source_Storage_storage_offset_(at::Tensor& self, at::Storage storage,
                                               int64_t storage_offset, c10::IntArrayRef size,
                                               c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, storage, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::OptionalIntArrayRef stride_opt;
  if (stride.data() != nullptr) {
    stride_opt = stride;
  }
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, stride_opt,
                               /*resize_storage=*/false);
  ensure_storage(self);
  return self;
}

// These two re-dispatch to set_.source_Storage_storage_offset above.
at::Tensor& set_source_Storage_(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_Tensor_(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

} // namespace

// For structured kernels' outputs: empty_strided without a trip through the dispatcher.
at::Tensor create_out(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      const c10::TensorOptions& options) {
  // The allocator serves the current device: switch only when the output lives elsewhere
  // (a guard costs two calls into the runtime on every operator).
  std::optional<c10::DeviceGuard> guard;
  if (options.device().index() != current_device()) {
    guard.emplace(options.device());
  }
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  if (strides.empty()) {
    // A meta function may ask for a memory format (channels-last) instead of strides.
    return at::detail::empty_generic(sizes, device_allocator(), kKeys, dtype,
                                     options.memory_format_opt());
  }
  return at::detail::empty_strided_generic(sizes, strides, device_allocator(), kKeys, dtype);
}

void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                const c10::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ",
              options.dtype(), ", but got ", out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ",
              options.device(), ", but got ", out.device(), " instead");
  if (at::native::resize_output(out, sizes)) {
    if (!strides.empty()) {
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

// ANCHOR: copy
// A CPU tensor over the same bytes as `t`: for device tensors, through the runtime's
// read/write view of device memory (host_view also checks the range and waits for the stream).
at::Tensor host_alias(const at::Tensor& t) {
  if (!t.is_privateuseone()) {
    return t;
  }
  const auto& storage = t.storage();
  const size_t view = call([&] { return host_view(addr(storage.data()), storage.nbytes()); });
  void* data = reinterpret_cast<char*>(view) + t.storage_offset() * t.itemsize();
  at::Tensor alias = at::from_blob(data, t.sizes(), t.strides(), t.options().device(at::kCPU));
  alias._set_conj(t.is_conj());
  alias._set_neg(t.is_neg());
  return alias;
}

namespace {

// A copy within one device that changes dtype (between the real dtypes and bool), strides or
// broadcasts: the Rust copy kernels, on the current stream. False if it does not apply (complex).
bool same_device_copy(const at::Tensor& self, const at::Tensor& dst) {
  if (self.device() != dst.device() || self.is_conj() != dst.is_conj() ||
      self.is_neg() != dst.is_neg()) {
    return false;
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(self)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .check_all_same_device(false)
                  .build();
  return run_pointwise(iter, Pointwise::Copy);
}

// Between host and device, or between devices, with a change of dtype, strides or broadcasting:
// the change is made where the data is (by the device's kernels, or by the CPU's on the host)
// and only contiguous bytes of dst's dtype cross, as CUDA's copy_ does. False within one device,
// and for what the device's kernels do not convert (complex, float8, math bits).
bool copy_through_contiguous(const at::Tensor& self, const at::Tensor& dst) {
  // The dtypes the device's copy kernels convert between (kernels/convert.rs): another (complex,
  // float8, ...) would come back here through `to` and recurse.
  const auto converted = [](const at::Tensor& t) {
    switch (t.scalar_type()) {
      case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
      case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16:
        return !t.is_conj() && !t.is_neg();
      default:
        return false;
    }
  };
  if (self.device() == dst.device() || !converted(self) || !converted(dst)) {
    return false;
  }
  // The source as dst's dtype and shape, contiguous, on its own side.
  const at::Tensor source = self.expand(dst.sizes()).to(dst.scalar_type()).contiguous();
  const at::Tensor landing = dst.is_contiguous() ? dst : at::empty(dst.sizes(), dst.options());
  call([&] { copy_bytes(addr(landing.data_ptr()), addr(source.data_ptr()), landing.nbytes(), false); });
  if (self.is_privateuseone() && dst.is_privateuseone() && !source.is_same(self)) {
    // Between two devices the copy is queued on dst's stream; `source`, a temporary of the
    // other device, must outlive it (its memory goes back to that device's stream).
    call([&] { synchronize_device(dst.device().index()); });
  }
  if (!landing.is_same(dst)) {
    dst.copy_(landing);
  }
  return true;
}

// Copies self into dst; either (or both) is an openreg tensor, on any device.
at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) {
    return dst;
  }
  // copy_ sends a device's copies here before its TensorIterator would check overlaps
  // (ATen's copy_impl): ours makes CPU's checks.
  if (self.device() == dst.device()) {
    check_overlap(dst, {&self});
  }
  const bool same_bytes = self.dtype() == dst.dtype() && self.sizes().equals(dst.sizes()) &&
                          self.is_contiguous() && dst.is_contiguous() &&
                          self.is_conj() == dst.is_conj() && self.is_neg() == dst.is_neg();
  if (same_bytes) {
    // One runtime copy: queued on a stream between devices, or with pinned memory when
    // non_blocking; otherwise done before returning.
    call([&] { copy_bytes(addr(dst.data_ptr()), addr(self.data_ptr()), dst.nbytes(), non_blocking); });
  } else if (!same_device_copy(self, dst) && !copy_through_contiguous(self, dst)) {
    // Complex or float8 dtypes, or math bits: ATen's CPU copy kernel over both views (after
    // the stream has run).
    host_alias(dst).copy_(host_alias(self));
  }
  return dst;
}
// ANCHOR_END: copy

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return openreg::_copy_from(self, dst, false);
}

// ANCHOR: local_scalar_dense
// `tensor.item()`: one element, copied to the host by the runtime.
at::Scalar _local_scalar_dense(const at::Tensor& self) {
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  call([&] { copy_bytes(addr(host.data_ptr()), addr(self.const_data_ptr()), self.itemsize(), false); });
  return at::_local_scalar_dense(host);
}
// ANCHOR_END: local_scalar_dense

// ANCHOR: math_bits
// Negative and conjugate views (`torch._neg_view(x)`, `z.conj()`) carry a bit instead of new
// values. PyTorch's fallbacks for those bits resolve a view by cloning it, and cloning an
// openreg tensor copies through _copy_from, which would meet the same fallback again, forever
// (a stack overflow). _copy_from resolves both bits itself (host_alias keeps them for ATen's
// CPU copy), so it is let through the fallbacks, as copy_ is for CPU and CUDA.
void register_math_bit_copies() {
  static torch::Library negative(torch::Library::IMPL, "aten", c10::DispatchKey::Negative,
                                 __FILE__, __LINE__);
  static torch::Library conjugate(torch::Library::IMPL, "aten", c10::DispatchKey::Conjugate,
                                  __FILE__, __LINE__);
  for (auto* library : {&negative, &conjugate}) {
    library->impl("_copy_from", torch::CppFunction::makeFallthrough());
    library->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }
}
// ANCHOR_END: math_bits

} // namespace

// ANCHOR: register
void register_minimal_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("empty.memory_format", TORCH_FN(empty_memory_format));
    library.impl("empty_strided", TORCH_FN(empty_strided));
    library.impl("as_strided", TORCH_FN(as_strided));
    library.impl("resize_", TORCH_FN(resize_));
    library.impl("_reshape_alias", TORCH_FN(_reshape_alias));
    library.impl("_copy_from", TORCH_FN(_copy_from));
    library.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
    library.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
    library.impl("set_.source_Tensor", TORCH_FN(set_source_Tensor_));
    library.impl("set_.source_Storage", TORCH_FN(set_source_Storage_));
    library.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_Storage_storage_offset_));
    library.impl("view", TORCH_FN(view));
    // View operators that only CPU/CUDA register: through the fallback they would return a
    // CPU result copied back (a new tensor, not a view), and writes through them would be
    // lost. ATen's implementations only restride, so they serve any device.
    library.impl("view_as_real", TORCH_FN(at::native::view_as_real));
    library.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
    library.impl("unfold", TORCH_FN(at::native::unfold));
    register_math_bit_copies();
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register

} // namespace openreg
