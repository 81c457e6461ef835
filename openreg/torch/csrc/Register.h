#pragma once
// Declarations the cxx bridge calls (see src/ffi.rs). Kept free of torch headers.

namespace openreg {
void register_backend();
void lazy_init_device();
} // namespace openreg
