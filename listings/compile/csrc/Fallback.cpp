// Every operator without an openreg kernel runs on the CPU: inputs are copied to the host,
// the CPU kernel runs, results are copied back (all through _copy_from). Random operators
// draw from the openreg device's generator.

#include "OpenReg.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <sstream>
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

// ANCHOR: blocklist
// Operators that must not silently run on the CPU: abs has a kernel (csrc/Stubs.cpp), so
// reaching the fallback would mean it is missing. OPENREG_FALLBACK_BLOCKLIST adds names.
bool blocked(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> set{"aten::abs", "aten::abs.out"};
    std::stringstream extra(std::getenv("OPENREG_FALLBACK_BLOCKLIST") ? std::getenv("OPENREG_FALLBACK_BLOCKLIST") : "");
    for (std::string item; std::getline(extra, item, ',');) {
      set.insert(item);
    }
    return set;
  }();
  return names.contains(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
}
// ANCHOR_END: blocklist

// ANCHOR: fallback
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK_NOT_IMPLEMENTED(!blocked(op.schema().operator_name()), "Operator '",
                              op.schema().operator_name(), "' is not implemented for device "
                              "openreg and may not fall back to the CPU");
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
  // The same function as one operator's kernel: a per-operator fallback.
  static torch::Library single(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                               __FILE__, __LINE__);
  static bool registered = [] {
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    single.impl("addcmul", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}

} // namespace openreg
