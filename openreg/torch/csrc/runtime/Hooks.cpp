#include "OpenReg.h"

#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "runtime/Generator.h"
#include "Register.h"

namespace openreg {
namespace {

// ANCHOR: hooks
class OpenRegHooks final : public at::PrivateUse1HooksInterface {
 public:
  // Called once, on first use of the device (at::globalContext().lazyInitDevice). The runtime
  // creates its state lazily, so there is nothing to do but make the generators.
  void init() const override {
    default_generator(0);
  }

  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < device_count();
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    call([&] { set_device(device); });
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return call([&] { return exchange_device(device); });
  }

  // Like exchangeDevice, but a no-op (returning the current device) for an invalid index.
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= device_count()) {
      return current_device();
    }
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    const auto device = pointer_device(addr(data));
    TORCH_CHECK(device >= 0, "pointer ", data, " is not openreg device memory");
    return {kOpenReg, device};
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return host_allocator();
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned(addr(data));
  }

  // Called by UntypedStorage.resize_() and by resize_ on our tensors.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};
// ANCHOR_END: hooks

} // namespace

void register_hooks() {
  static OpenRegHooks hooks;
  static bool registered = (at::RegisterPrivateUse1HooksInterface(&hooks), true);
  (void)registered;
}

void lazy_init_device() {
  at::globalContext().lazyInitDevice(kOpenReg);
}

} // namespace openreg
