// The global fallback: any aten operator without an openreg kernel runs on the CPU, with its
// tensors copied to the host and its results copied back.

#include "OpenReg.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <sstream>
#include <unordered_set>

#include "runtime/Generator.h"
#include "operators/Structured.h"

namespace openreg {
namespace {

bool is_generator(const c10::Argument& argument) {
  const auto& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) {
    return true;
  }
  const auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// ANCHOR: blocklist
// Operators that must not run on the CPU silently: `abs` has a kernel of its own (the STUB
// in Stubs.cpp), so reaching the fallback would mean that kernel is missing. Users add names
// with OPENREG_FALLBACK_BLOCKLIST="aten::mul.Tensor,aten::sum" to find what still falls back.
const std::unordered_set<std::string>& blocklist() {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> set{"aten::abs", "aten::abs.out"};
    if (const char* extra = std::getenv("OPENREG_FALLBACK_BLOCKLIST")) {
      std::stringstream list(extra);
      for (std::string name; std::getline(list, name, ',');) {
        if (!name.empty()) {
          set.insert(name);
        }
      }
    }
    return set;
  }();
  return names;
}

// A view operator's result shares its input's memory. Run on the CPU, it would be a copy, and
// writes through it would be lost: such operators need a kernel (Minimal.cpp registers them).
bool returns_view(const c10::FunctionSchema& schema) {
  for (const auto& result : schema.returns()) {
    if (result.alias_info() != nullptr && !result.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}
// ANCHOR_END: blocklist

// ANCHOR: fallback
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = full_name(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!blocklist().contains(name), "Operator '", name,
                              "' is not implemented for device openreg and may not fall back "
                              "to the CPU (see OPENREG_FALLBACK_BLOCKLIST)");
  TORCH_CHECK_NOT_IMPLEMENTED(!returns_view(op.schema()), "Operator '", name,
                              "' is a view operator with no openreg kernel: the CPU fallback "
                              "would return a copy instead of a view");
  if (record_fallback(name) && warn_fallback()) {
    TORCH_WARN("openreg: ", name, " has no openreg kernel; it runs on the CPU (copied there and back)");
  }
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();

  // The CPU kernel would happily mix devices; PyTorch's rule is that it is an error.
  std::optional<c10::Device> device;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) {
      return;
    }
    if (!device) {
      device = t.device();
    }
    TORCH_CHECK(*device == t.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device, " and ", t.device(), "!");
  };
  for (size_t i = first; i < stack->size(); ++i) {
    const auto& value = (*stack)[i];
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) {
        visit(t);
      }
    } else if (value.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : value.toOptionalTensorList()) {
        if (t) {
          visit(*t);
        }
      }
    }
  }

  // Random operators: the CPU kernel must draw from the openreg device's generator (given,
  // or the device's default), so seeding torch.openreg makes results reproducible.
  for (size_t i = 0; i < arguments.size() && device; ++i) {
    auto& value = (*stack)[first + i];
    if (!is_generator(arguments[i])) {
      continue;
    }
    if (value.isNone()) {
      value = host_generator(default_generator(device->index()).get<OpenRegGeneratorImpl>(), device->index());
      continue;
    }
    const at::Generator generator = value.toGenerator();
    // CUDA's wording for a generator of another device type (tools match on it), then ours.
    TORCH_CHECK(generator.device().type() == device->type(), "Expected a '", device->type(),
                "' device type for generator but found '", generator.device().type(), "' (",
                op.schema().name(), " runs on ", *device, ")");
    TORCH_CHECK(generator.device() == *device, "Expected a generator on ", *device,
                " for ", op.schema().name(), ", but got one on ", generator.device());
    value = host_generator(generator.get<OpenRegGeneratorImpl>(), device->index());
  }

  at::native::cpu_fallback(op, stack);
}
// ANCHOR_END: fallback

} // namespace

// For kernels that find they cannot compute a call (a dtype their formulas lack): the same
// path an operator without a kernel takes.
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack);
}

// ANCHOR: note_host_path
// Every CPU run is counted (torch.openreg.fallback_counts()); with OPENREG_WARN_FALLBACK=1 the
// first of each kind is also a warning.
bool warn_fallback() {
  static const bool warn = [] {
    const char* v = std::getenv("OPENREG_WARN_FALLBACK");
    return v != nullptr && std::string(v) == "1";
  }();
  return warn;
}

void note_host_path(const char* op, c10::ScalarType dtype) {
  const std::string name = std::string("aten::") + op + " (" + c10::toString(dtype) + ")";
  if (record_fallback(name) && warn_fallback()) {
    TORCH_WARN("openreg: ", name, " has no openreg kernel for this dtype; it runs ATen's CPU "
               "kernel on the host, synchronously");
  }
}
// ANCHOR_END: note_host_path

// ANCHOR: register_fallback
void register_fallback() {
  // Global: every operator without an openreg kernel.
  static torch::Library global(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                               __FILE__, __LINE__);
  // Per operator: the same boxed function, registered as the kernel of one operator (it then
  // shows in the dispatch table as that operator's PrivateUse1 kernel).
  static torch::Library single(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                               __FILE__, __LINE__);
  static bool registered = [] {
    global.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    single.impl("atan2", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_fallback

} // namespace openreg
