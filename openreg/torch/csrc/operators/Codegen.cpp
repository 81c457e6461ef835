// Kernels behind the registrations torchgen generates from native_functions.yaml.
//
// torchgen generates structured wrappers only for PyTorch's own backends: for an external one
// (gen_backend_stubs.py: "TODO: allow structured external backends later") every operator is
// unstructured, so `maximum` and `maximum.out` are two kernels to write. Each is one line over
// the structured meta function, as PyTorch's own generated code would be.

#include "operators/Structured.h"

#include <ATen/ops/maximum.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/minimum_meta.h>

#include "PrivateUse1NativeFunctions.h"

namespace openreg {

// ANCHOR: kernels
at::Tensor PrivateUse1NativeFunctions::maximum(const at::Tensor& self, const at::Tensor& other) {
  return pointwise<at::meta::structured_maximum, Variant::Functional>(
      "maximum", Pointwise::Maximum, 0.0, {},
      [&](at::Tensor out) { at::maximum_out(out, host_alias(self), host_alias(other)); }, self,
      other);
}

at::Tensor& PrivateUse1NativeFunctions::maximum_out(const at::Tensor& self,
                                                    const at::Tensor& other, at::Tensor& out) {
  pointwise<at::meta::structured_maximum, Variant::Out>(
      "maximum.out", Pointwise::Maximum, 0.0, out,
      [&](at::Tensor o) { at::maximum_out(o, host_alias(self), host_alias(other)); }, self,
      other);
  return out;
}
// ANCHOR_END: kernels

at::Tensor PrivateUse1NativeFunctions::minimum(const at::Tensor& self, const at::Tensor& other) {
  return pointwise<at::meta::structured_minimum, Variant::Functional>(
      "minimum", Pointwise::Minimum, 0.0, {},
      [&](at::Tensor out) { at::minimum_out(out, host_alias(self), host_alias(other)); }, self,
      other);
}

at::Tensor& PrivateUse1NativeFunctions::minimum_out(const at::Tensor& self,
                                                    const at::Tensor& other, at::Tensor& out) {
  pointwise<at::meta::structured_minimum, Variant::Out>(
      "minimum.out", Pointwise::Minimum, 0.0, out,
      [&](at::Tensor o) { at::minimum_out(o, host_alias(self), host_alias(other)); }, self,
      other);
  return out;
}

} // namespace openreg

// ANCHOR: include_generated
// The generated file registers its wrappers with a static TORCH_LIBRARY_IMPL. A static
// library's object file is linked only if something uses it, so it is compiled here, in the
// same object as `register_codegen_ops`, which Register.cpp calls.
#include "RegisterPrivateUse1.cpp"

namespace openreg {
void register_codegen_ops() {
  const auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName("aten::maximum", "out"));
  TORCH_CHECK(op && op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1),
              "torchgen's registrations for openreg did not run");
}
} // namespace openreg
// ANCHOR_END: include_generated
