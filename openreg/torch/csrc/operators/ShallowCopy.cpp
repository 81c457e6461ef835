// Parameter identity across Module.to(). `Module._apply` moves a parameter in place
// (`param.data = moved`) only when `torch._has_compatible_shallow_copy_type(param, moved)` is
// true; otherwise it builds a new Parameter, which unties tied weights, breaks Lazy modules
// and strands optimizers built before `.to()`. The inline check in c10/core/TensorImpl.h
// (`has_compatible_shallow_copy_type`) lists CPU, CUDA, MPS, HIP, XPU, HPU and MTIA as one
// family of dense backends, not PrivateUse1 (pytorch/pytorch#116255). The check is also an
// operator, so a backend can answer it for its own tensors.

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <typeinfo>

namespace openreg {
namespace {

// ANCHOR: shallow_copy
// A plain dense TensorImpl on the CPU or an openreg device. Swapping the metadata and storage
// of one such tensor for another's (`shallow_copy_from`) loses nothing: neither has subclass
// state. A backend whose tensors carry a TensorImpl subclass must not answer true here.
bool plain_dense(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return t.layout() == at::kStrided && (t.is_cpu() || t.is_privateuseone()) &&
         typeid(*impl) == typeid(c10::TensorImpl);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (plain_dense(self) && plain_dense(from));
}
// ANCHOR_END: shallow_copy

} // namespace

void register_shallow_copy() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
