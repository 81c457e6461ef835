#include "runtime/Generator.h"

#include <mutex>
#include <vector>

#include "OpenReg.h"

namespace openreg {

OpenRegGeneratorImpl::OpenRegGeneratorImpl(c10::DeviceIndex device_index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kOpenReg, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

// Each call locks the host generator, as the host kernels drawing from it do.
#define OPENREG_WITH_HOST(expr)                        \
  std::lock_guard<std::mutex> lock(host_.mutex());     \
  return host_.unsafeGetGeneratorImpl()->expr

void OpenRegGeneratorImpl::set_current_seed(uint64_t seed) {
  OPENREG_WITH_HOST(set_current_seed(seed));
}
uint64_t OpenRegGeneratorImpl::current_seed() const {
  OPENREG_WITH_HOST(current_seed());
}
uint64_t OpenRegGeneratorImpl::seed() {
  OPENREG_WITH_HOST(seed());
}
void OpenRegGeneratorImpl::set_offset(uint64_t offset) {
  OPENREG_WITH_HOST(set_offset(offset));
}
uint64_t OpenRegGeneratorImpl::get_offset() const {
  OPENREG_WITH_HOST(get_offset());
}
void OpenRegGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  OPENREG_WITH_HOST(set_state(new_state));
}
c10::intrusive_ptr<c10::TensorImpl> OpenRegGeneratorImpl::get_state() const {
  OPENREG_WITH_HOST(get_state());
}
#undef OPENREG_WITH_HOST

OpenRegGeneratorImpl* OpenRegGeneratorImpl::clone_impl() const {
  auto* copy = new OpenRegGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(host_.mutex());
  copy->host_ = host_.clone();
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

uint64_t draw_seed(c10::DeviceIndex device_index) {
  at::Generator host = default_generator(device_index).get<OpenRegGeneratorImpl>()->host();
  std::lock_guard<std::mutex> lock(host.mutex());  // `host` shares the generator's state
  return at::check_generator<at::CPUGeneratorImpl>(host)->random64();
}

at::Generator new_generator(c10::DeviceIndex device_index) {
  const auto index = device_index == -1 ? current_device() : device_index;
  call([&] { return check_device(index); });
  return at::make_generator<OpenRegGeneratorImpl>(index);
}

} // namespace openreg
