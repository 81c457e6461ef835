// Every operator without an openreg kernel runs on the CPU: inputs are copied to the host,
// the CPU kernel runs, results are copied back (all through _copy_from). Random operators
// draw from the openreg device's generator.

#include "OpenReg.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_set>

#include "Generator.h"

namespace openreg {
namespace {

bool is_generator(const c10::Argument& argument) {
  const auto& type = argument.type();
  const auto optional = type->cast<c10::OptionalType>();
  return type->kind() == c10::TypeKind::GeneratorType ||
         (optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType);
}

// ANCHOR: observability
// The fallback is the list of kernels to write next, so it reports what reaches it: every
// run is counted (torch.openreg.fallback_counts()); OPENREG_WARN_FALLBACK=1 warns on the first
// run of each operator; OPENREG_FALLBACK_BLOCKLIST="aten::mul,aten::sum.dim_IntList" makes
// operators raise instead (a bare name blocks every overload), to find who calls them.
std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool blocked(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> set;
    const char* list = std::getenv("OPENREG_FALLBACK_BLOCKLIST");
    std::stringstream items(list != nullptr ? list : "");
    for (std::string item; std::getline(items, item, ',');) {
      if (!item.empty()) {
        set.insert(item);
      }
    }
    return set;
  }();
  return names.contains(name.name) || names.contains(full_name(name));
}

bool warn_fallback() {
  static const bool warn = [] {
    const char* value = std::getenv("OPENREG_WARN_FALLBACK");
    return value != nullptr && std::string(value) == "1";
  }();
  return warn;
}

void note_fallback(const c10::OperatorName& name) {
  const std::string operator_name = full_name(name);
  TORCH_CHECK_NOT_IMPLEMENTED(!blocked(name), "Operator '", operator_name,
                              "' is not implemented for device openreg and may not fall back "
                              "to the CPU (see OPENREG_FALLBACK_BLOCKLIST)");
  if (record_fallback(operator_name) && warn_fallback()) {
    TORCH_WARN("openreg: ", operator_name, " has no openreg kernel; it runs on the CPU, with "
               "its operands copied to the host and its results back");
  }
}
// ANCHOR_END: observability

// ANCHOR: fallback
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  note_fallback(op.schema().operator_name());
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  std::optional<c10::Device> device;  // of the first openreg tensor argument
  for (size_t i = first; i < stack->size() && !device; ++i) {
    if ((*stack)[i].isTensor() && (*stack)[i].toTensor().is_privateuseone()) {
      device = (*stack)[i].toTensor().device();
    }
  }
  for (size_t i = 0; i < arguments.size() && device; ++i) {
    auto& value = (*stack)[first + i];
    if (!is_generator(arguments[i])) {
      continue;
    }
    const at::Generator generator =
        value.isNone() ? default_generator(device->index()) : value.toGenerator();
    TORCH_CHECK(generator.device() == *device, "Expected a generator on ", *device,
                ", but got one on ", generator.device());
    value = generator.get<OpenRegGeneratorImpl>()->host();
  }
  at::native::cpu_fallback(op, stack);
}
// ANCHOR_END: fallback

} // namespace

void register_fallback() {
  static torch::Library library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}

} // namespace openreg
