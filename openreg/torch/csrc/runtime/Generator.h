#pragma once

#include <ATen/core/Generator.h>

#include "openreg-torch/src/ffi.rs.h"

namespace openreg {

// ANCHOR: generator
// The random state of one OpenReg device, as CUDA's generator keeps it: a seed and a Philox
// offset (runtime/generator.rs). Kernels reserve numbers from it when they are launched; the
// state is 16 bytes, seed then offset, as CUDA's get_state returns it.
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
  // Sharing one state between generators, for graphs that capture with another generator's
  // state (torch.Generator.graphsafe_set_state).
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  // What the Rust kernels reserve their numbers from.
  const PhiloxGenerator& state() const {
    return *state_;
  }

 private:
  OpenRegGeneratorImpl* clone_impl() const override;
  rust::Box<PhiloxGenerator> state_;
};
// ANCHOR_END: generator

// The default generator of a device (-1: the current device).
const at::Generator& default_generator(c10::DeviceIndex device_index);
at::Generator new_generator(c10::DeviceIndex device_index);
// The generator a random operator on `device` draws from: `gen`, checked, or the default.
OpenRegGeneratorImpl* generator_for(const std::optional<at::Generator>& gen, c10::Device device);

// A CPU generator for a random operator that runs through the CPU fallback, seeded from a
// fresh offset of `generator`: the run is reproducible from the device's seed.
at::Generator host_generator(OpenRegGeneratorImpl* generator, c10::DeviceIndex device_index);

} // namespace openreg
