#include "OpenReg.h"
#include "runtime/MemoryHistory.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/env.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <string>
#include <unordered_set>

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


// PYTORCH_ALLOC_CONF for the device allocator. c10 parses the keys every accelerator shares
// (c10/core/AllocatorConfig.h: max_split_size_mb, garbage_collection_threshold,
// roundup_power2_divisions, large_segment_size_mb, ...) and rejects a key nobody registered;
// a backend registers a hook for the keys of its own, and reads the shared ones after c10.

namespace {

namespace alloc = c10::CachingAllocator;

// ANCHOR: config_hook
// Keys are shared by every backend in the process, so ours carry the device's name.
const std::unordered_set<std::string>& device_keys() {
  static const std::unordered_set<std::string> keys{"openreg_parked_blocks"};
  return keys;
}

// The hook: called with the whole setting string after c10 has parsed its keys.
void parse_device_settings(const std::string& env) {
  size_t parked = 64;  // the allocator's default
  const alloc::ConfigTokenizer tokens(env);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == "," || !device_keys().count(tokens[i])) {
      if (tokens[i] != ",") {
        i = tokens.skipKey(i);  // c10's key, checked by c10
      }
      continue;
    }
    TORCH_CHECK_VALUE(i + 2 < tokens.size() && tokens[i + 1] == ":",
                      "PYTORCH_ALLOC_CONF: expected openreg_parked_blocks:<count>");
    const std::string& value = tokens[i + 2];
    TORCH_CHECK_VALUE(!value.empty() && value.size() <= 6 && value.find_first_not_of("0123456789") == std::string::npos,
                      "PYTORCH_ALLOC_CONF: openreg_parked_blocks must be a count from 0 to 4096, got '", value, "'");
    parked = std::stoul(value);
    TORCH_CHECK_VALUE(parked <= 4096,
                      "PYTORCH_ALLOC_CONF: openreg_parked_blocks must be a count from 0 to 4096, got '", value, "'");
    i += 2;
  }
  using Config = alloc::AcceleratorAllocatorConfig;
  AllocatorSettings settings{Config::max_split_size(), Config::max_non_split_rounding_size(),
                             Config::garbage_collection_threshold(), Config::large_segment_size(), {}, parked};
  for (size_t k = 0; k < 64; ++k) {
    settings.roundup_power2_divisions.push_back(Config::roundup_power2_divisions(size_t{1} << k));
  }
  call([&] { set_allocator_settings(std::move(settings)); });
}
// ANCHOR_END: config_hook

} // namespace

// ANCHOR: register_config
// What REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK does, without a static object. There is one hook
// slot: a second backend's registration would replace ours. Then the setting already in the
// environment is applied: c10 parsed it when its configuration was first used.
void register_allocator_config() {
  static const bool registered = [] {
    alloc::AcceleratorAllocatorConfig::registerDeviceConfigParserHook(parse_device_settings, device_keys());
    std::string env = c10::utils::get_env("PYTORCH_ALLOC_CONF").value_or("");
    if (env.empty()) {
      env = c10::utils::get_env("PYTORCH_CUDA_ALLOC_CONF").value_or("");
    }
    alloc::AcceleratorAllocatorConfig::instance();  // parses the environment, once
    parse_device_settings(env);
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_config

// Tracebacks for memory snapshots. The allocator (src/runtime/allocator/history.rs) asks for
// one at each allocation while history is recorded; torch::CapturedTraceback is what CUDA's
// and XPU's allocators keep, so the frames come out as `torch.cuda._memory_viz` reads them.

// ANCHOR: gather
// Gathering is cheap (instruction pointers and Python code objects, no strings); turning them
// into names is left to the snapshot. The Python part takes the GIL if the thread can.
std::shared_ptr<Traceback> gather_traceback(bool python, bool cpp) {
  auto traceback = std::make_shared<Traceback>();
  traceback->captured = torch::CapturedTraceback::gather(python, /*script=*/python, cpp);
  return traceback;
}
// ANCHOR_END: gather

size_t Symbolizer::add(const std::shared_ptr<Traceback>& traceback) {
  tracebacks_.push_back(traceback);
  return tracebacks_.size() - 1;
}

rust::Vec<SymbolizedFrame> Symbolizer::symbolize() {
  std::vector<torch::CapturedTraceback*> raw;
  raw.reserve(tracebacks_.size());
  for (const auto& t : tracebacks_) {
    raw.push_back(static_cast<torch::CapturedTraceback*>(t->captured.get()));
  }
  const torch::SymbolizedTracebacks symbolized = torch::symbolize(raw);
  rust::Vec<SymbolizedFrame> frames;
  for (size_t i = 0; i < symbolized.tracebacks.size(); ++i) {
    for (const uint64_t index : symbolized.tracebacks[i]) {
      const auto& f = symbolized.all_frames.at(index);
      frames.push_back(SymbolizedFrame{i, rust::String::lossy(f.funcname), rust::String::lossy(f.filename),
                                       static_cast<int64_t>(f.lineno)});
    }
  }
  return frames;
}

std::unique_ptr<Symbolizer> new_symbolizer() {
  return std::make_unique<Symbolizer>();
}

} // namespace openreg
