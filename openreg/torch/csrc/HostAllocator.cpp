#include "OpenReg.h"

#include <cstring>

namespace openreg {
namespace {

void delete_host_memory(void* ptr) {
  host_free(addr(ptr));
}

// ANCHOR: host_allocator
// Pinned host memory: ordinary CPU tensors whose memory the runtime registered, so that
// `is_pinned()` is true and copies from it may be asynchronous.
class OpenRegHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = reinterpret_cast<void*>(call([&] { return host_malloc(nbytes); }));
    return {ptr, ptr, &delete_host_memory, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_host_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
// ANCHOR_END: host_allocator

} // namespace

c10::Allocator* host_allocator() {
  static OpenRegHostAllocator allocator;
  return &allocator;
}

} // namespace openreg
