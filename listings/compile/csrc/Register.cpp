#include "Register.h"

#include "OpenReg.h"

namespace openreg {

// ANCHOR: register_backend
void register_backend() {
  c10::SetAllocator(kOpenReg, device_allocator());
  register_guard();
  register_ops();
  register_kernels();
  register_stubs();
  register_custom_ops();
  register_autocast();
  register_fallback();
  register_hooks();
}
// ANCHOR_END: register_backend

} // namespace openreg
