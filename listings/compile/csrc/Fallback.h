#pragma once
// The CPU fallback (csrc/Fallback.cpp), callable from a kernel that covers only some cases:
// the rest (other dtypes, CPU scalars) runs there, with its operands copied to the host.

#include <ATen/native/CPUFallback.h>

namespace openreg {

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ANCHOR: fall_back
// fall_back<ATEN_OP(add_Tensor)>(self, other, alpha): the operator's arguments, boxed and run
// through cpu_fallback, exactly as if the operator had no openreg kernel.
template <class Op, class... Args>
decltype(auto) fall_back(Args&&... args) {
  return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}
// ANCHOR_END: fall_back

} // namespace openreg
