// Kernels plugged into ATen's DispatchStubs. Many ATen operators (abs, and most pointwise
// ones) are one generic function that builds a TensorIterator and calls a per-device "stub";
// registering our function for the stub's PrivateUse1 slot, and the operator's `out` kernel as
// that generic function, gives the operator an openreg kernel without writing it again.

#include "operators/Structured.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/abs_native.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: abs_kernel
void abs_kernel(at::TensorIteratorBase& iter) {
  // float32, float16 and bfloat16, any strides: the Rust kernel, on the current stream.
  if (run_pointwise(iter, Pointwise::Abs)) {
    return;
  }
  // Anything else runs ATen's CPU kernel over the runtime's view of the operands: correct,
  // synchronous, and said once, so the missing fast path is visible.
  note_host_path("abs", iter.common_dtype());
  at::Tensor out = host_alias(at::Tensor(iter.tensor_base(0)));
  at::abs_out(out, host_alias(at::Tensor(iter.tensor_base(1))));
}
// ANCHOR_END: abs_kernel

} // namespace

// ANCHOR: register_stubs
void register_stubs() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    // What REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &abs_kernel) does, without a static object
    // that the linker could drop.
    at::native::abs_stub.set_privateuse1_dispatch_ptr(&abs_kernel);
    library.impl("abs.out", TORCH_FN(at::native::abs_out));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_stubs

} // namespace openreg
