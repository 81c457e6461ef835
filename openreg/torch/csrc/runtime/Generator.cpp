#include "runtime/Generator.h"

#include <cstring>
#include <mutex>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/CPUAllocator.h>

#include "OpenReg.h"

namespace openreg {

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kOpenReg, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(generator_new(seed)) {}

// ANCHOR: state
void OpenRegGeneratorImpl::set_current_seed(uint64_t seed) {
  generator_set_seed(*state_, seed);
}
uint64_t OpenRegGeneratorImpl::current_seed() const {
  return generator_seed(*state_);
}
// A non-deterministic seed, as CUDA's: from the host's random device.
uint64_t OpenRegGeneratorImpl::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
  set_current_seed(random);
  return random;
}
void OpenRegGeneratorImpl::set_offset(uint64_t offset) {
  call([&] { return generator_set_offset(*state_, offset); });
}
uint64_t OpenRegGeneratorImpl::get_offset() const {
  return generator_offset(*state_);
}

// 16 bytes: the seed, then the offset (CUDA's layout).
c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  at::TensorBase state = at::detail::empty_cpu({16}, at::TensorOptions().dtype(at::kByte));
  const uint64_t values[2] = {generator_seed(*state_), generator_offset(*state_)};
  std::memcpy(state.mutable_data_ptr<uint8_t>(), values, sizeof(values));
  return state.getIntrusivePtr();
}

void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);  // a contiguous CPU ByteTensor, or TypeError
  TORCH_CHECK(new_state.numel() == 16, "RNG state is wrong size: expected 16 bytes (seed, offset), got ",
              new_state.numel());
  uint64_t values[2];
  std::memcpy(values, new_state.data(), sizeof(values));
  generator_set_seed(*state_, values[0]);  // resets the offset to 0
  call([&] { return generator_set_offset(*state_, values[1]); });
}
// ANCHOR_END: state

void OpenRegGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<OpenRegGeneratorImpl*>(state.get());
  TORCH_CHECK(other != nullptr, "graphsafe_set_state: expected an openreg generator's state");
  state_ = generator_share(*other->state_);
}

c10::intrusive_ptr<c10::GeneratorImpl> OpenRegGeneratorImpl::graphsafe_get_state() const {
  auto shared = c10::make_intrusive<OpenRegGeneratorImpl>(device().index());
  shared->state_ = generator_share(*state_);
  return shared;
}

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  auto* copy = new OpenRegGeneratorImpl(device().index());
  copy->state_ = generator_clone(*state_);
  return copy;
}

// ANCHOR: default_generator
const at::Generator& default_generator(c10::DeviceIndex device_index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<OpenRegGeneratorImpl>(i));
    }
  });
  const auto index = device_index == -1 ? current_device() : device_index;
  call([&] { return check_device(index); });
  return generators[index];
}
// ANCHOR_END: default_generator

OpenRegGeneratorImpl* generator_for(const std::optional<at::Generator>& gen, c10::Device device) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == device.type(), "Expected a '", device.type(),
                "' device type for generator but found '", gen->device().type(), "'");
    TORCH_CHECK(gen->device() == device, "Expected a generator on ", device, ", but got one on ",
                gen->device());
  }
  return at::get_generator_or_default<OpenRegGeneratorImpl>(gen, default_generator(device.index()));
}

at::Generator host_generator(OpenRegGeneratorImpl* generator, c10::DeviceIndex device_index) {
  const uint64_t seed = call([&] { return generator_host_seed(generator->state(), device_index); });
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

at::Generator new_generator(c10::DeviceIndex device_index) {
  const auto index = device_index == -1 ? current_device() : device_index;
  call([&] { return check_device(index); });
  return at::make_generator<OpenRegGeneratorImpl>(index);
}

} // namespace openreg
