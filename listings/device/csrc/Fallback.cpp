// Every operator without an openreg kernel runs on the CPU: inputs are copied to the host,
// the CPU kernel runs, results are copied back (all through _copy_from).

#include "OpenReg.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

namespace openreg {
namespace {

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

} // namespace

void register_fallback() {
  static torch::Library library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}

} // namespace openreg
