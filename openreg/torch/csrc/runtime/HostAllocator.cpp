#include "OpenReg.h"

#include <ATen/core/CachingHostAllocator.h>

#include <cstring>

namespace openreg {
namespace {

void delete_host_memory(void* ptr) {
  host_free(addr(ptr));
}

// ANCHOR: host_allocator
void fill(c10::CachingAllocator::Stat& out, const Stat& in) {
  out.current = in.current;
  out.peak = in.peak;
  out.allocated = in.allocated;
  out.freed = in.freed;
}

// Pinned host memory: ordinary CPU tensors whose memory the runtime registered, so that
// `is_pinned()` is true and copies from it may be asynchronous. Cached in Rust.
class OpenRegHostAllocator final : public at::HostAllocator {
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

  // An asynchronous copy uses the block: do not reuse it before the stream got there.
  bool record_event(void* ptr, void* /*ctx*/, c10::Stream stream) override {
    return call([&] { return record_host_event(addr(ptr), stream.device_index(), stream.id()); });
  }

  void empty_cache() override {
    empty_host_cache();
  }

  at::HostStats get_stats() override {
    const HostStats s = host_stats();
    at::HostStats out;
    fill(out.active_requests, s.active_requests);
    fill(out.active_bytes, s.active_bytes);
    fill(out.allocations, s.allocations);
    fill(out.allocated_bytes, s.allocated_bytes);
    out.num_host_alloc = s.num_host_alloc;
    out.num_host_free = s.num_host_free;
    return out;
  }

  void reset_accumulated_stats() override {
    reset_host_stats(/*peak_only=*/false);
  }

  void reset_peak_stats() override {
    reset_host_stats(/*peak_only=*/true);
  }
};
// ANCHOR_END: host_allocator

} // namespace

at::HostAllocator* host_allocator() {
  static OpenRegHostAllocator allocator;
  return &allocator;
}

} // namespace openreg
