#include "OpenReg.h"

#include <c10/core/DeviceGuard.h>

namespace openreg {
namespace {

// profile_memory=True: PyTorch's profiler records each allocation and free with the device's
// totals after it. Only when it asks, so an allocation pays one thread-local check otherwise.
void report_to_profiler(void* ptr, int64_t size) {
  const MemoryReport r = memory_report(addr(ptr));
  c10::reportMemoryUsageToProfiler(ptr, size, r.allocated, r.reserved,
                                   c10::Device(kOpenReg, static_cast<c10::DeviceIndex>(r.device)));
}

// The deleter stored in every DataPtr. Rust's device_free cannot fail (it reports problems).
void delete_device_memory(void* ptr) {
  if (ptr != nullptr && c10::memoryProfilingEnabled()) {
    const int64_t size = memory_report(addr(ptr)).size;
    device_free(addr(ptr));
    report_to_profiler(ptr, -size);
    return;
  }
  device_free(addr(ptr));
}

void fill(c10::CachingDeviceAllocator::StatArray& out, const std::array<Stat, 3>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].current = in[i].current;
    out[i].peak = in[i].peak;
    out[i].allocated = in[i].allocated;
    out[i].freed = in[i].freed;
  }
}

// ANCHOR: allocator
class OpenRegDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = current_device();
    void* ptr = reinterpret_cast<void*>(call([&] { return device_malloc(device, nbytes); }));
    if (ptr != nullptr && c10::memoryProfilingEnabled()) {
      report_to_profiler(ptr, memory_report(addr(ptr)).size);
    }
    return {ptr, ptr, &delete_device_memory, c10::Device(kOpenReg, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_device_memory;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    call([&] { copy_bytes(addr(dest), addr(src), count, false); });
  }

  bool initialized() override {
    return true;
  }

  // Gives wholly free cached segments back to the runtime (and their pages to the host).
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    empty_cache();
  }

  // Tensor.record_stream: the block is not reused before the stream's queued work is done.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    call([&] { record_stream(addr(ptr.get()), stream.device_index(), stream.id()); });
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const DeviceStats s = call([&] { return device_stats(device); });
    c10::CachingDeviceAllocator::DeviceStats out;
    fill(out.allocation, s.allocation);
    fill(out.segment, s.segment);
    fill(out.active, s.active);
    fill(out.inactive_split, s.inactive_split);
    fill(out.allocated_bytes, s.allocated_bytes);
    fill(out.reserved_bytes, s.reserved_bytes);
    fill(out.active_bytes, s.active_bytes);
    fill(out.inactive_split_bytes, s.inactive_split_bytes);
    fill(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    call([&] { reset_accumulated_stats(device); });
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    call([&] { reset_peak_stats(device); });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const MemoryInfo info = call([&] { return device_memory_info(device); });
    return {info.free, info.total};
  }
};
// ANCHOR_END: allocator

} // namespace

c10::DeviceAllocator* device_allocator() {
  static OpenRegDeviceAllocator allocator;
  return &allocator;
}

// ANCHOR: resize_storage
// Grows (or shrinks) a device storage: new memory, then a device-to-device copy of what
// fits. The CPU version would memcpy on the host, which device memory does not allow.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  TORCH_CHECK(storage.allocator() != nullptr, "Trying to resize a storage without an allocator");
  const c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = storage.allocator()->allocate(nbytes);
  const size_t keep = std::min(storage.nbytes(), nbytes);
  if (keep > 0) {
    call([&] { copy_bytes(addr(fresh.get()), addr(storage.data()), keep, false); });
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}
// ANCHOR_END: resize_storage

} // namespace openreg
