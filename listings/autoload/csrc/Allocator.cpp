#include "OpenReg.h"

namespace openreg {
namespace {

void delete_device_memory(void* ptr) {
  device_free(reinterpret_cast<size_t>(ptr));
}

// ANCHOR: allocator
// Device memory for tensors, on the current device.
class OpenRegAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    void* ptr = reinterpret_cast<void*>(call([&] { return device_malloc(nbytes); }));
    return {ptr, ptr, &delete_device_memory, c10::Device(kOpenReg, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_device_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage copies stay on the device: the host cannot read either side.
    call([&] { copy_device_to_device(reinterpret_cast<size_t>(dest), reinterpret_cast<size_t>(src), count); });
  }
};
// ANCHOR_END: allocator

} // namespace

c10::Allocator* device_allocator() {
  static OpenRegAllocator allocator;
  return &allocator;
}

} // namespace openreg
