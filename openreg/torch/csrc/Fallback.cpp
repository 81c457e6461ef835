// The global fallback: any aten operator without an openreg kernel runs on the CPU, with its
// tensors copied to the host and its results copied back.

#include "OpenReg.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "Generator.h"

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

// ANCHOR: fallback
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
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
      value = default_generator(device->index()).get<OpenRegGeneratorImpl>()->host();
      continue;
    }
    const at::Generator generator = value.toGenerator();
    TORCH_CHECK(generator.device() == *device, "Expected a generator on ", *device,
                " for ", op.schema().name(), ", but got one on ", generator.device());
    value = generator.get<OpenRegGeneratorImpl>()->host();
  }

  at::native::cpu_fallback(op, stack);
}
// ANCHOR_END: fallback

} // namespace

void register_fallback() {
  static torch::Library library(torch::Library::IMPL,
                                "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static bool registered = [] {
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}

} // namespace openreg
