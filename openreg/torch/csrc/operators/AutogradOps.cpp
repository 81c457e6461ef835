// Operators whose forward and backward are a C++ torch::autograd::Function, registered for
// the AutogradPrivateUse1 key: the autograd layer of openreg tensors runs them directly.

#include "OpenReg.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: autograd_functions
// Forward returns its input itself; backward halves the gradient.
struct ReturnsSelf : public torch::autograd::Function<ReturnsSelf> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, at::Tensor self) {
    return self;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad) {
    return {grad[0].mul(0.5)};
  }
};

// Forward returns a view of its input (the schema says so: Tensor(a) -> Tensor(a)).
struct Aliasing : public torch::autograd::Function<Aliasing> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, at::Tensor self) {
    return self.view_symint(self.sym_sizes());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grad) {
    return {grad[0].mul(0.5)};
  }
};

at::Tensor custom_autograd_fn_returns_self(at::Tensor x) {
  return ReturnsSelf::apply(x);
}

at::Tensor custom_autograd_fn_aliasing(at::Tensor x) {
  return Aliasing::apply(x);
}
// ANCHOR_END: autograd_functions

} // namespace

void register_autograd_ops() {
  static torch::Library schemas(torch::Library::FRAGMENT, "openreg", std::nullopt, __FILE__,
                                __LINE__);
  static torch::Library autograd(torch::Library::IMPL, "openreg",
                                 c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  static bool registered = [] {
    schemas.def("custom_autograd_fn_returns_self(Tensor input) -> Tensor");
    schemas.def("custom_autograd_fn_aliasing(Tensor(a) input) -> Tensor(a)");
    autograd.impl("custom_autograd_fn_returns_self", TORCH_FN(custom_autograd_fn_returns_self));
    autograd.impl("custom_autograd_fn_aliasing", TORCH_FN(custom_autograd_fn_aliasing));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
