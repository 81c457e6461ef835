// PYTORCH_ALLOC_CONF for the device allocator. c10 parses the keys every accelerator shares
// (c10/core/AllocatorConfig.h: max_split_size_mb, garbage_collection_threshold,
// roundup_power2_divisions, large_segment_size_mb, ...) and rejects a key nobody registered;
// a backend registers a hook for the keys of its own, and reads the shared ones after c10.

#include "OpenReg.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/util/env.h>

#include <string>
#include <unordered_set>

namespace openreg {
namespace {

namespace alloc = c10::CachingAllocator;

// ANCHOR: config_hook
// Keys are shared by every backend in the process, so ours carry the device's name.
const std::unordered_set<std::string>& device_keys() {
  static const std::unordered_set<std::string> keys{"openreg_parked_blocks"};
  return keys;
}

// The hook: called with the whole setting string after c10 has parsed its keys.
void parse_device_settings(const std::string& env) {
  size_t parked = 64;  // the allocator's default
  const alloc::ConfigTokenizer tokens(env);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == "," || !device_keys().count(tokens[i])) {
      if (tokens[i] != ",") {
        i = tokens.skipKey(i);  // c10's key, checked by c10
      }
      continue;
    }
    TORCH_CHECK_VALUE(i + 2 < tokens.size() && tokens[i + 1] == ":",
                      "PYTORCH_ALLOC_CONF: expected openreg_parked_blocks:<count>");
    const std::string& value = tokens[i + 2];
    TORCH_CHECK_VALUE(!value.empty() && value.size() <= 6 && value.find_first_not_of("0123456789") == std::string::npos,
                      "PYTORCH_ALLOC_CONF: openreg_parked_blocks must be a count from 0 to 4096, got '", value, "'");
    parked = std::stoul(value);
    TORCH_CHECK_VALUE(parked <= 4096,
                      "PYTORCH_ALLOC_CONF: openreg_parked_blocks must be a count from 0 to 4096, got '", value, "'");
    i += 2;
  }
  using Config = alloc::AcceleratorAllocatorConfig;
  AllocatorSettings settings{Config::max_split_size(), Config::max_non_split_rounding_size(),
                             Config::garbage_collection_threshold(), Config::large_segment_size(), {}, parked};
  for (size_t k = 0; k < 64; ++k) {
    settings.roundup_power2_divisions.push_back(Config::roundup_power2_divisions(size_t{1} << k));
  }
  call([&] { set_allocator_settings(std::move(settings)); });
}
// ANCHOR_END: config_hook

} // namespace

// ANCHOR: register_config
// What REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK does, without a static object. There is one hook
// slot: a second backend's registration would replace ours. Then the setting already in the
// environment is applied: c10 parsed it when its configuration was first used.
void register_allocator_config() {
  static const bool registered = [] {
    alloc::AcceleratorAllocatorConfig::registerDeviceConfigParserHook(parse_device_settings, device_keys());
    std::string env = c10::utils::get_env("PYTORCH_ALLOC_CONF").value_or("");
    if (env.empty()) {
      env = c10::utils::get_env("PYTORCH_CUDA_ALLOC_CONF").value_or("");
    }
    alloc::AcceleratorAllocatorConfig::instance();  // parses the environment, once
    parse_device_settings(env);
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_config

} // namespace openreg
