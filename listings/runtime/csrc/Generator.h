#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <mutex>

namespace openreg {

// ANCHOR: generator
// A device's random state. Random kernels run on the host (through the CPU fallback), so it
// holds a CPU generator and gives it an openreg device.
class OpenRegGeneratorImpl final : public c10::GeneratorImpl {
 private:
  // Host kernels lock the held generator; so does every call made through this one.
  template <typename F>
  decltype(auto) locked(F f) const {
    std::lock_guard<std::mutex> lock(host_.mutex());
    return f(host_.unsafeGetGeneratorImpl());
  }

 public:
  explicit OpenRegGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(at::make_generator<at::CPUGeneratorImpl>()) {}

  void set_current_seed(uint64_t seed) override { locked([&](auto g) { g->set_current_seed(seed); }); }
  uint64_t current_seed() const override { return locked([](auto g) { return g->current_seed(); }); }
  uint64_t seed() override { return locked([](auto g) { return g->seed(); }); }
  void set_offset(uint64_t offset) override { locked([&](auto g) { g->set_offset(offset); }); }
  uint64_t get_offset() const override { return locked([](auto g) { return g->get_offset(); }); }
  void set_state(const c10::TensorImpl& state) override { locked([&](auto g) { g->set_state(state); }); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return locked([](auto g) { return g->get_state(); });
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  const at::Generator& host() const { return host_; }

 private:
  OpenRegGeneratorImpl* clone_impl() const override {
    auto* copy = new OpenRegGeneratorImpl(device().index());
    std::lock_guard<std::mutex> lock(host_.mutex());
    copy->host_ = host_.clone();
    return copy;
  }
  mutable at::Generator host_;  // mutable: const getters lock its mutex
};
// ANCHOR_END: generator

const at::Generator& default_generator(c10::DeviceIndex index);

} // namespace openreg
