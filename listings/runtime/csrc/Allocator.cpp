#include "OpenReg.h"

#include <c10/core/CachingDeviceAllocator.h>

namespace openreg {
namespace {

void delete_device_memory(void* ptr) {
  allocator_free(reinterpret_cast<size_t>(ptr));
}

// PyTorch's statistics for one quantity: ours count every block alike, so the "small" and
// "large" pools hold nothing and "all" holds everything.
c10::CachingDeviceAllocator::StatArray stat_array(const StatValues& values) {
  c10::CachingDeviceAllocator::StatArray stats;
  auto& all = stats[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
  all.current = values.current;
  all.peak = values.peak;
  all.allocated = values.allocated;
  all.freed = values.freed;
  return stats;
}

// ANCHOR: allocator
// The caching allocator (src/allocator.rs), as PyTorch's c10::DeviceAllocator: through it,
// torch.accelerator.memory_allocated(), empty_cache() and record_stream reach our allocator.
class OpenRegAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    const int64_t stream = call([&] { return current_stream(device); });
    void* ptr = reinterpret_cast<void*>(call([&] { return allocator_malloc(nbytes, device, stream); }));
    return {ptr, ptr, &delete_device_memory, c10::Device(kOpenReg, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_device_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage copies stay on the device: the host cannot read either side.
    call([&] { copy_device_to_device(reinterpret_cast<size_t>(dest), reinterpret_cast<size_t>(src), count); });
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*pool*/) override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      call([&] { empty_cache(d); });
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    record_stream(reinterpret_cast<size_t>(ptr.get()), stream.id());
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const MemoryStats ours = call([&] { return memory_stats(device); });
    c10::CachingDeviceAllocator::DeviceStats stats;
    stats.allocated_bytes = stat_array(ours.allocated_bytes);
    stats.active_bytes = stat_array(ours.allocated_bytes);  // no block is split: active = allocated
    stats.requested_bytes = stat_array(ours.allocated_bytes);
    stats.reserved_bytes = stat_array(ours.reserved_bytes);
    stats.allocation = stat_array(ours.allocations);
    stats.active = stat_array(ours.allocations);
    stats.segment = stat_array(ours.segments);
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    call([&] { return check_device(device); });
    reset_accumulated_stats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    call([&] { return check_device(device); });
    reset_peak_stats(device);
  }
};
// ANCHOR_END: allocator

} // namespace

c10::DeviceAllocator* device_allocator() {
  static OpenRegAllocator allocator;
  return &allocator;
}

} // namespace openreg
