// The minimal operators: allocation, views, and the copies between host and device. Views
// only change metadata, so ATen's implementations serve; data moves through the runtime's
// copies, because the host cannot address device memory.

#include "OpenReg.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace openreg {
namespace {

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// ANCHOR: empty
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, device_allocator(), kKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}
// ANCHOR_END: empty

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys,
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  std::optional<int64_t> storage_offset;
  if (offset) {
    storage_offset = offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), storage_offset);
}

// ANCHOR: copy
// A tensor's elements lie in one span of its storage, from its first element to its last.
// Copying that span keeps the layout, so the same sizes and strides find them on the host.
struct HostCopy {
  at::Tensor span;  // the span's bytes, on the host
  at::Tensor view;  // the tensor's elements in it
};

HostCopy host_copy(const at::Tensor& t, bool read) {
  int64_t elements = t.numel() == 0 ? 0 : 1;
  for (int64_t d = 0; d < t.dim() && elements > 0; ++d) {
    elements += (t.size(d) - 1) * t.stride(d);
  }
  at::Tensor span = at::empty({elements}, t.options().device(at::kCPU));
  if (read) {
    call([&] {
      copy_device_to_host({static_cast<uint8_t*>(span.data_ptr()), span.nbytes()},
                          reinterpret_cast<size_t>(t.data_ptr()));
    });
  }
  at::Tensor view = span.as_strided(t.sizes(), t.strides());
  view._set_conj(t.is_conj());
  view._set_neg(t.is_neg());
  return {span, view};
}

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) {
    return dst;
  }
  const at::Tensor source = self.is_cpu() ? self : host_copy(self, true).view;
  if (dst.is_cpu()) {
    dst.copy_(source);
    return dst;
  }
  // Bytes of the span that are not dst's elements must survive: read the span first unless
  // dst's elements fill it.
  HostCopy staging = host_copy(dst, !dst.is_non_overlapping_and_dense());
  staging.view.copy_(source);
  call([&] {
    copy_host_to_device(reinterpret_cast<size_t>(dst.data_ptr()),
                        {static_cast<const uint8_t*>(staging.span.data_ptr()), staging.span.nbytes()});
  });
  return dst;
}
// ANCHOR_END: copy

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return openreg::_copy_from(self, dst, false);
}

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(host_copy(self, true).view);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  // Growing allocates through the storage's allocator, which allocates on the current device.
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias_symint(self, size, stride);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view_symint(self, size);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

} // namespace

// ANCHOR: register
void register_ops() {
  static torch::Library ops(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                            __FILE__, __LINE__);
  static bool registered = [] {
    ops.impl("empty.memory_format", TORCH_FN(empty_memory_format));
    ops.impl("empty_strided", TORCH_FN(empty_strided));
    ops.impl("as_strided", TORCH_FN(as_strided));
    ops.impl("resize_", TORCH_FN(resize_));
    ops.impl("_reshape_alias", TORCH_FN(_reshape_alias));
    ops.impl("_copy_from", TORCH_FN(_copy_from));
    ops.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
    ops.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
    ops.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
    ops.impl("set_.source_Storage", TORCH_FN(set_source_storage));
    ops.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
    ops.impl("view", TORCH_FN(view));
    // View operators only CPU and CUDA register: the fallback would return a copy, not a view.
    ops.impl("view_as_real", TORCH_FN(at::native::view_as_real));
    ops.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
    ops.impl("unfold", TORCH_FN(at::native::unfold));
    // Resolving a negative or conjugate view clones it, and the clone copies through
    // _copy_from: without these, that fallback would meet itself again, forever.
    // _copy_from handles both bits (host_copy keeps them).
    static torch::Library negative(torch::Library::IMPL, "aten", c10::DispatchKey::Negative,
                                   __FILE__, __LINE__);
    static torch::Library conjugate(torch::Library::IMPL, "aten", c10::DispatchKey::Conjugate,
                                    __FILE__, __LINE__);
    for (auto* bits : {&negative, &conjugate}) {
      bits->impl("_copy_from", torch::CppFunction::makeFallthrough());
      bits->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
    }
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register

} // namespace openreg
