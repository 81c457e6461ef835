// abs through its DispatchStub: at::native::abs_out builds a TensorIterator and calls
// abs_stub for the iterator's device; we fill the stub's PrivateUse1 slot.

#include "OpenReg.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: abs_kernel
void abs_kernel(at::TensorIteratorBase& iter) {
  if (iter.common_dtype() == at::kFloat && iter.is_contiguous()) {
    abs_f32(reinterpret_cast<size_t>(iter.data_ptr(0)), reinterpret_cast<size_t>(iter.data_ptr(1)),
            iter.numel());
    return;
  }
  // Other dtypes and layouts: ATen's CPU kernel, on the same (host) memory.
  auto host = [](const at::TensorBase& t) {
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  };
  at::Tensor out = host(iter.tensor_base(0));
  at::abs_out(out, host(iter.tensor_base(1)));
}
// ANCHOR_END: abs_kernel

} // namespace

// ANCHOR: register_stubs
void register_stubs() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    // What REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &abs_kernel) does, without a static
    // object the linker could drop.
    at::native::abs_stub.set_privateuse1_dispatch_ptr(&abs_kernel);
    library.impl("abs.out", TORCH_FN(at::native::abs_out));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_stubs

} // namespace openreg
