// abs through its DispatchStub: at::native::abs_out builds a TensorIterator and calls
// abs_stub for the iterator's device; we fill the stub's PrivateUse1 slot.

#include "Fallback.h"
#include "OpenReg.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/abs_ops.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: abs_kernel
// The stub's kernel gets the iterator abs_out built: operands, shape and byte strides.
void abs_kernel(at::TensorIteratorBase& iter) {
  std::array<size_t, 2> data{};
  c10::SmallVector<int64_t, 8> strides;
  for (int k = 0; k < 2; ++k) {
    data[k] = reinterpret_cast<size_t>(iter.data_ptr(k));
    strides.append(iter.strides(k).begin(), iter.strides(k).end());
  }
  call([&] {
    abs_f32({data.data(), 2}, {iter.shape().data(), iter.shape().size()}, {strides.data(), strides.size()});
  });
}

// The Rust kernel is float32's; other dtypes run on the CPU, through the fallback.
at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  if (self.scalar_type() != at::kFloat || out.scalar_type() != at::kFloat) {
    return fall_back<at::_ops::abs_out>(self, out);
  }
  return at::native::abs_out(self, out);
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
    library.impl("abs.out", TORCH_FN(abs_out));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_stubs

} // namespace openreg
