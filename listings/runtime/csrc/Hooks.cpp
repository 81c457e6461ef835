#include "OpenReg.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "Generator.h"

namespace openreg {
namespace {

// ANCHOR: hooks
class OpenRegHooks final : public at::PrivateUse1HooksInterface {
 public:
  void init() const override {
    default_generator(0);
  }
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return device_count() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count();
  }
  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    call([&] { return exchange_device(device); });
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return call([&] { return exchange_device(device); });
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return device < 0 || device >= device_count() ? current_device() : exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    const auto device = index == -1 ? current_device() : index;
    call([&] { return check_device(device); });
    return at::make_generator<OpenRegGeneratorImpl>(device);
  }
};
// ANCHOR_END: hooks

} // namespace

void register_hooks() {
  static OpenRegHooks hooks;
  static bool registered = (at::RegisterPrivateUse1HooksInterface(&hooks), true);
  (void)registered;
}

} // namespace openreg
