#include "OpenReg.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace openreg {
namespace {

// ANCHOR: guard
// The device half of the guard interface; streams come in the streams chapter, so this
// stage has one stream per device (id 0) that runs everything synchronously.
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

  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
};
// ANCHOR_END: guard

} // namespace

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kOpenReg, new OpenRegGuardImpl());
}

} // namespace openreg
