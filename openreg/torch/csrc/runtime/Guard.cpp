#include "OpenReg.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace openreg {
namespace {

// PyTorch keeps an event as a `void*`; ours is a Rust Box<Event> released into it.
const Event& as_event(void* event) {
  return *static_cast<const Event*>(event);
}

// `torch.Stream(device="openreg")` passes a device without an index: the current device.
c10::Device with_index(c10::Device device) {
  return device.has_index() ? device : c10::Device(kOpenReg, current_device());
}

c10::Stream make_stream(c10::Device device, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE, with_index(device), id);
}

// ANCHOR: guard
class OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override {
    return kOpenReg;
  }

  // Devices: the runtime keeps the current device per thread.
  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_CHECK(device.is_privateuseone(), "expected an openreg device, got ", device);
    return {kOpenReg, call([&] { return exchange_device(device.index()); })};
  }

  c10::Device getDevice() const override {
    return {kOpenReg, current_device()};
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.is_privateuseone(), "expected an openreg device, got ", device);
    call([&] { set_device(device.index()); });
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      set_device(device.index());
    } catch (const rust::Error&) {
      // noexcept: an invalid index leaves the current device unchanged.
    }
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  // Streams: (device, id) pairs; the runtime owns the stream objects.
  c10::Stream getStream(c10::Device device) const override {
    device = with_index(device);
    return make_stream(device, call([&] { return current_stream(device.index()); }));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    device = with_index(device);
    call([&] { return check_device(device.index()); });
    return make_stream(device, 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    device = with_index(device);
    return make_stream(device, call([&] { return stream_from_pool(device.index(), isHighPriority); }));
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    device = with_index(device);
    return make_stream(device, call([&] { return new_stream(device.index(), priority); }));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    const auto previous = call([&] { return exchange_stream(stream.device_index(), stream.id()); });
    return make_stream(stream.device(), previous);
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return reinterpret_cast<void*>(call([&] { return stream_handle(stream.device_index(), stream.id()); }));
  }

  bool queryStream(const c10::Stream& stream) const override {
    return call([&] { return query_stream(stream.device_index(), stream.id()); });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    call([&] { synchronize_stream(stream.device_index(), stream.id()); });
  }

  // True while the stream records a graph (csrc/runtime/Graph.cpp).
  bool isStreamCapturing(const c10::Stream& stream) const override {
    return call([&] { return stream_is_capturing(stream.device_index(), stream.id()); });
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    call([&] { synchronize_device(device_index); });
  }

  // Events: created lazily by the first record, destroyed by PyTorch.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", static_cast<int>(device_index),
                " does not match the recording stream's device index ",
                static_cast<int>(stream.device_index()));
    if (*event == nullptr) {
      // BACKEND_DEFAULT is what torch.Event(enable_timing=True) asks for.
      *event = event_create(flag == c10::EventFlag::BACKEND_DEFAULT).into_raw();
    }
    call([&] { event_record(as_event(*event), stream.device_index(), stream.id()); });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) {
      call([&] { event_block(as_event(event), stream.device_index(), stream.id()); });
    }
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || event_query(as_event(event));
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      call([&] { event_synchronize(as_event(event)); });
    }
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    return call([&] { return event_elapsed_time(as_event(start), as_event(end)); });
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event != nullptr) {
      rust::Box<Event>::from_raw(static_cast<Event*>(event));  // dropped here
    }
  }

  // Memory: let the allocator know a stream uses this memory.
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    device_allocator()->recordStream(data_ptr, stream);
  }

  // Every dtype works: what has no native kernel runs through the CPU fallback.
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    return c10::DeviceCapability();
  }
};
// ANCHOR_END: guard

} // namespace

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kOpenReg, new OpenRegGuardImpl());
}

} // namespace openreg
