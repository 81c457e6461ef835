// Kernels plugged into ATen's DispatchStubs. Many ATen operators (abs, and most pointwise
// ones) are one generic function that builds a TensorIterator and calls a per-device "stub";
// registering our function for the stub's PrivateUse1 slot, and the operator's `out` kernel as
// that generic function, gives the operator an openreg kernel without writing it again.

#include "operators/Structured.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/LinearAlgebra.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/addr.h>
#include <ATen/ops/addr_native.h>
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
  on_host("abs", iter.common_dtype(), [&] {
    at::Tensor out = host_alias(at::Tensor(iter.tensor_base(0)));
    at::abs_out(out, host_alias(at::Tensor(iter.tensor_base(1))));
  });
}
// ANCHOR_END: abs_kernel

// addr (beta * self + alpha * outer(vec1, vec2)): ATen's addr builds the iterator (self, vec1
// as a column, vec2 as a row, broadcast) and calls the stub with beta and alpha.
void addr_kernel(at::TensorIterator& iter, const at::Scalar& beta, const at::Scalar& alpha) {
  const bool real = !beta.isComplex() && !alpha.isComplex();
  if (real && run_pointwise(iter, Pointwise::Addr, beta.toDouble(), alpha.toDouble())) {
    return;
  }
  on_host("addr", iter.common_dtype(), [&] {
    // The iterator's operands: the output, self expanded to it, vec1 as a column, vec2.
    at::Tensor out = host_alias(at::Tensor(iter.tensor_base(0)));
    at::addr_out(out, host_alias(at::Tensor(iter.tensor_base(1))),
                 host_alias(at::Tensor(iter.tensor_base(2))).squeeze(1), host_alias(at::Tensor(iter.tensor_base(3))),
                 beta, alpha);
  });
}

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
    at::native::addr_stub.set_privateuse1_dispatch_ptr(&addr_kernel);
    library.impl("addr", TORCH_FN(at::native::addr));
    library.impl("addr_", TORCH_FN(at::native::addr_));
    library.impl("addr.out", TORCH_FN(at::native::addr_out));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_stubs

} // namespace openreg
