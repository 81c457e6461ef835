#include "Generator.h"

#include <mutex>
#include <vector>

#include "OpenReg.h"

namespace openreg {

// One default generator per device, made on first use.
const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<OpenRegGeneratorImpl>(i));
    }
  });
  const auto device = index == -1 ? current_device() : index;
  call([&] { return check_device(device); });
  return generators[device];
}

} // namespace openreg
