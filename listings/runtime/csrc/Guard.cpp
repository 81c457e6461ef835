#include "OpenReg.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace openreg {
namespace {

// An event is a `void*` that PyTorch holds: a Rust Event released from its Box on the first
// record, and taken back by destroyEvent.
const Event& event_of(void* event) {
  return *static_cast<const Event*>(event);
}

// ANCHOR: guard
// The guard with streams and events (src/stream.rs, src/event.rs): torch.Stream, torch.Event
// and torch.accelerator reach them through these methods.
class OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override {
    return kOpenReg;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    return {kOpenReg, call([&] { return exchange_device(device.index()); })};
  }

  c10::Device getDevice() const override {
    return {kOpenReg, current_device()};
  }

  void setDevice(c10::Device device) const override {
    call([&] { return exchange_device(device.index()); });
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      exchange_device(device.index());
    } catch (const rust::Error&) {
    }
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  static c10::Stream stream_of(c10::DeviceIndex device, int64_t id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kOpenReg, device), id);
  }

  // A device given without an index means the current one.
  static c10::DeviceIndex index(c10::Device device) {
    return device.has_index() ? device.index() : current_device();
  }

  c10::Stream getStream(c10::Device device) const override {
    const auto d = index(device);
    return stream_of(d, call([&] { return current_stream(d); }));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return stream_of(index(device), 0);
  }

  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    const auto d = index(device);
    return stream_of(d, call([&] { return new_stream(d); }));
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    const auto d = stream.device_index();
    return stream_of(d, call([&] { return exchange_stream(d, stream.id()); }));
  }

  bool queryStream(const c10::Stream& stream) const override {
    return call([&] { return query_stream(stream.device_index(), stream.id()); });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    call([&] { synchronize_stream(stream.device_index(), stream.id()); });
  }

  void synchronizeDevice(const c10::DeviceIndex device) const override {
    call([&] { synchronize_device(device); });
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex /*device*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) {
      *event = new_event().into_raw();
    }
    call([&] { event_of(*event).record(stream.device_index(), stream.id()); });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) {
      call([&] { event_of(event).block(stream.device_index(), stream.id()); });
    }
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || event_of(event).query();
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      event_of(event).synchronize();
    }
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "openreg: elapsed_time needs two events that were recorded");
    return call([&] { return event_of(start).elapsed_ms(event_of(end)); });
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    if (event != nullptr) {
      rust::Box<Event>::from_raw(static_cast<Event*>(event));  // dropped here
    }
  }

  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& stream) const override {
    record_stream(reinterpret_cast<size_t>(ptr.get()), stream.id());
  }
};
// ANCHOR_END: guard

} // namespace

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kOpenReg, new OpenRegGuardImpl());
}

} // namespace openreg
