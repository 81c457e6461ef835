#include "Register.h"

#include "OpenReg.h"

namespace openreg {

// ANCHOR: register_backend
void register_backend() {
  c10::SetAllocator(kOpenReg, device_allocator());
  register_guard();
  register_ops();
  register_fallback();
  register_hooks();
}
// ANCHOR_END: register_backend

} // namespace openreg
