#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include "torch-openreg/src/ffi.rs.h"
#include "rust/cxx.h"

namespace openreg {

constexpr auto kOpenReg = c10::DeviceType::PrivateUse1;

// Calls into Rust; a Rust error becomes a c10 error (a Python RuntimeError).
template <typename F>
decltype(auto) call(F&& f) {
  try {
    return f();
  } catch (const rust::Error& error) {
    TORCH_CHECK(false, error.what());
  }
}

c10::DeviceAllocator* device_allocator();
void register_guard();
void register_ops();
void register_fallback();
void register_kernels();
void register_stubs();
void register_custom_ops();
void register_autocast();
void register_hooks();

} // namespace openreg
