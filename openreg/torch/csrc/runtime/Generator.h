#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace openreg {

// ANCHOR: generator
// The random state of one OpenReg device. Random kernels run on the host (through the CPU
// fallback), so the state is a CPU generator's (Mersenne Twister) held inside; this class
// gives it an openreg device, so PyTorch files it under the right device and checks it.
class OpenRegGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit OpenRegGeneratorImpl(c10::DeviceIndex device_index,
                                uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  // The CPU generator the host kernels draw from.
  const at::Generator& host() const {
    return host_;
  }

 private:
  OpenRegGeneratorImpl* clone_impl() const override;
  mutable at::Generator host_;  // mutable: const getters lock its mutex
};
// ANCHOR_END: generator

// The default generator of a device (-1: the current device).
const at::Generator& default_generator(c10::DeviceIndex device_index);
at::Generator new_generator(c10::DeviceIndex device_index);
// One 64-bit draw from a device's default generator: the seed of a counter-based kernel
// (dropout's random numbers are a hash of it and the element's index).
uint64_t draw_seed(c10::DeviceIndex device_index);

} // namespace openreg
