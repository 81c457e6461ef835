// The global fallback: any aten operator without an openreg kernel runs on the CPU, with its
// tensors copied to the host and its results copied back. It behaves like a device kernel: it
// refuses operands on two devices, and the CPU kernel sees the operands' aliasing as it is on
// the device, so it raises CPU's errors for overlapping out= arguments and writes through one
// view show in another.

#include "OpenReg.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <cstdlib>
#include <regex>
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
// with OPENREG_FALLBACK_BLOCKLIST="aten::mul,aten::sum.dim_IntList": a bare name blocks every
// overload, `name.overload` one of them.
bool blocked(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> names = [] {
    std::unordered_set<std::string> set{"aten::abs"};
    if (const char* extra = std::getenv("OPENREG_FALLBACK_BLOCKLIST")) {
      std::stringstream list(extra);
      for (std::string item; std::getline(list, item, ',');) {
        if (!item.empty()) {
          set.insert(item);
        }
      }
    }
    return set;
  }();
  return names.contains(name.name) || names.contains(name.name + "." + name.overload_name);
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

// An argument the operator writes to: `Tensor(a!)`, or a list of them (`Tensor(a!)[]`).
bool is_written(const c10::Argument& argument) {
  const c10::AliasInfo* alias = argument.alias_info();
  if (alias == nullptr) {
    return false;
  }
  if (alias->isWrite()) {
    return true;
  }
  for (const auto& contained : alias->containedTypes()) {
    if (contained.isWrite()) {
      return true;
    }
  }
  return false;
}

// ANCHOR: devices
// PyTorch's rule for a device kernel: every tensor on one device, except a CPU tensor of
// 0 dimensions read as a scalar. Indexing also takes CPU indices, as CUDA's does.
class DeviceCheck {
 public:
  void visit(const at::Tensor& t, bool cpu_allowed) {
    if (!t.defined() || (t.is_cpu() && cpu_allowed)) {
      return;
    }
    if (!device_) {
      device_ = t.device();
    } else if (*device_ != t.device() && !other_) {
      other_ = t.device();
    }
  }
  // The device every tensor is on, if any tensor is.
  std::optional<c10::Device> check(const std::string& name) const {
    TORCH_CHECK(!other_, "Expected all tensors to be on the same device, but found at least two devices, ",
                *device_, " and ", *other_, "! (", name, " runs on openreg through its CPU fallback)");
    return device_;
  }

 private:
  std::optional<c10::Device> device_, other_;
};
// ANCHOR_END: devices

// ANCHOR: host_copies
// Device tensors on the host with their aliasing kept. The tensors over one device storage
// become views of one host buffer holding the bytes they reach, so the CPU kernel sees the
// overlaps the device tensors have (and raises CPU's errors for them), and a write through one
// view is seen through another. Buffers are copied in and out by the runtime, once each.
class HostCopies {
 public:
  void note(const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone() || t.numel() == 0) {
      return;
    }
    int64_t last = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      last += (t.size(d) - 1) * t.stride(d);
    }
    const int64_t item = static_cast<int64_t>(t.itemsize());
    // Buffers start at a 16-byte boundary of the storage, so every dtype's offset is whole.
    const int64_t begin = t.storage_offset() * item / 16 * 16, end = (last + 1) * item;
    Span& span = span_of(t.storage());
    span.begin = std::min(span.begin, begin);
    span.end = std::max(span.end, end);
  }

  void copy_to_host(c10::Device device) {
    for (Span& span : spans_) {
      at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device));
      bytes.set_(span.storage, span.begin, {span.end - span.begin}, {1});
      span.device = bytes;
      span.host = bytes.cpu();
    }
  }

  at::Tensor host(const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) {
      return t;
    }
    at::Tensor h;
    if (t.numel() == 0) {
      h = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
    } else {
      const Span& span = span_of(t.storage());
      const int64_t item = static_cast<int64_t>(t.itemsize());
      h = at::empty({0}, t.options().device(at::kCPU));
      h.set_(span.host.storage(), (t.storage_offset() * item - span.begin) / item, t.sizes(), t.strides());
    }
    h._set_conj(t.is_conj());
    h._set_neg(t.is_neg());
    return h;
  }

  // After the kernel: a written host tensor's bytes go back to the device, and the device
  // tensor takes its new sizes and strides if the kernel resized it.
  void copy_to_device(const at::Tensor& device, const at::Tensor& host) {
    if (!device.defined() || !device.is_privateuseone()) {
      return;
    }
    // A kernel may leave its out= as a conjugate or negative view of what it wrote (linalg's
    // solvers do): the bits come back with the bytes.
    device._set_conj(host.is_conj());
    device._set_neg(host.is_neg());
    Span* span = device.numel() > 0 ? &span_of(device.storage()) : nullptr;
    const int64_t item = static_cast<int64_t>(device.itemsize());
    if (span != nullptr && host.storage().is_alias_of(span->host.storage())) {
      span->written = true;
      const int64_t offset = (span->begin + host.storage_offset() * item) / item;
      if (host.sizes() != device.sizes() || host.strides() != device.strides() || offset != device.storage_offset()) {
        device.as_strided_(host.sizes(), host.strides(), offset);
      }
      return;
    }
    // The kernel gave the host tensor new memory (an out= resized beyond what it had).
    resized_.emplace_back(device, host);
  }

  void finish() {
    for (const Span& span : spans_) {
      if (span.written) {
        span.device.copy_(span.host);
      }
    }
    // The host tensor's new memory is laid out on the device as it is on the host (CPU's
    // kernels may lay an out= tensor inside a larger buffer, LAPACK's leading dimension),
    // from the device tensor's offset, growing its storage as resize_ would.
    for (auto& [device, host] : resized_) {
      const int64_t item = static_cast<int64_t>(device.itemsize());
      const int64_t base = device.storage_offset() * item, bytes = static_cast<int64_t>(host.storage().nbytes());
      if (static_cast<int64_t>(device.storage().nbytes()) < base + bytes) {
        resize_storage_bytes(device.storage(), base + bytes);
      }
      device.as_strided_(host.sizes(), host.strides(), device.storage_offset() + host.storage_offset());
      if (bytes > 0) {
        const auto byte_options = at::TensorOptions().dtype(at::kByte);
        at::Tensor from = at::empty({0}, byte_options).set_(host.storage(), 0, {bytes}, {1});
        at::empty({0}, byte_options.device(device.device())).set_(device.storage(), base, {bytes}, {1}).copy_(from);
      }
    }
  }

 private:
  struct Span {
    c10::Storage storage;
    int64_t begin = INT64_MAX, end = 0;
    at::Tensor device, host;  // the bytes, on the device and their copy on the host
    bool written = false;
  };
  Span& span_of(const c10::Storage& storage) {
    for (Span& span : spans_) {
      if (span.storage.is_alias_of(storage)) {
        return span;
      }
    }
    spans_.push_back(Span{storage});
    return spans_.back();
  }
  std::vector<Span> spans_;
  std::vector<std::pair<at::Tensor, at::Tensor>> resized_;
};
// ANCHOR_END: host_copies

// ANCHOR: fallback
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = full_name(schema.operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!blocked(schema.operator_name()), "Operator '", name,
                              "' is not implemented for device openreg and may not fall back "
                              "to the CPU (see OPENREG_FALLBACK_BLOCKLIST)");
  TORCH_CHECK_NOT_IMPLEMENTED(!returns_view(schema), "Operator '", name,
                              "' is a view operator with no openreg kernel: the CPU fallback "
                              "would return a copy instead of a view");
  const auto& arguments = schema.arguments();
  const size_t first = stack->size() - arguments.size();
  auto value = [&](size_t i) -> c10::IValue& { return (*stack)[first + i]; };

  // 1. One device for every tensor; a `device` argument (a factory) names it if no tensor does.
  DeviceCheck devices;
  std::optional<c10::Device> factory_device;
  for (size_t i = 0; i < arguments.size(); ++i) {
    // A 0-dim CPU tensor may be an input (not an output); CPU indices may index.
    const bool scalar_ok = !is_written(arguments[i]);
    const bool indices = arguments[i].name() == "indices";
    if (value(i).isTensor()) {
      devices.visit(value(i).toTensor(), scalar_ok && value(i).toTensor().dim() == 0);
    } else if (value(i).isTensorList()) {
      for (const at::Tensor& t : value(i).toTensorList()) {
        devices.visit(t, scalar_ok && t.dim() == 0);
      }
    } else if (value(i).isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : value(i).toOptionalTensorList()) {
        if (t) {
          devices.visit(*t, indices || (scalar_ok && t->dim() == 0));
        }
      }
    } else if (value(i).isDevice() && value(i).toDevice().is_privateuseone()) {
      factory_device = value(i).toDevice();
      value(i) = c10::IValue(c10::Device(at::kCPU));
    }
  }
  const std::optional<c10::Device> common = devices.check(name);
  TORCH_CHECK(!common || !factory_device || *common == *factory_device, "Expected all tensors to be on the same "
              "device, but found at least two devices, ", *common, " and ", *factory_device, "!");
  TORCH_CHECK(!common || common->is_privateuseone(), "Expected all tensors to be on the same device, but "
              "found at least two devices, ", *common, " and openreg! (", name, ")");
  const c10::Device device = common.value_or(factory_device.value_or(c10::Device(kOpenReg, 0)));

  if (record_fallback(name) && warn_fallback()) {
    TORCH_WARN("openreg: ", name, " has no openreg kernel; it runs on the CPU (copied there and back)");
  }

  // 2. Random operators draw from the device's generator (given, or the device's default), so
  // seeding torch.openreg makes them reproducible.
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!is_generator(arguments[i])) {
      continue;
    }
    if (value(i).isNone()) {
      value(i) = host_generator(default_generator(device.index()).get<OpenRegGeneratorImpl>(), device.index());
      continue;
    }
    const at::Generator generator = value(i).toGenerator();
    // CUDA's wording for a generator of another device type (tools match on it), then ours.
    TORCH_CHECK(generator.device().type() == device.type(), "Expected a '", device.type(),
                "' device type for generator but found '", generator.device().type(), "' (",
                schema.name(), " runs on ", device, ")");
    TORCH_CHECK(generator.device() == device, "Expected a generator on ", device, " for ",
                schema.name(), ", but got one on ", generator.device());
    value(i) = host_generator(generator.get<OpenRegGeneratorImpl>(), device.index());
  }

  // 3. The tensors on the host, aliasing kept.
  HostCopies copies;
  std::vector<c10::IValue> originals(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    originals[i] = value(i);
    if (value(i).isTensor()) {
      copies.note(value(i).toTensor());
    } else if (value(i).isTensorList()) {
      for (const at::Tensor& t : value(i).toTensorList()) {
        copies.note(t);
      }
    } else if (value(i).isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : value(i).toOptionalTensorList()) {
        if (t) {
          copies.note(*t);
        }
      }
    }
  }
  copies.copy_to_host(device);
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (value(i).isTensor()) {
      value(i) = copies.host(value(i).toTensor());
    } else if (value(i).isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value(i).toTensorList()) {
        list.push_back(copies.host(t));
      }
      value(i) = list;
    } else if (value(i).isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor>& t : value(i).toOptionalTensorList()) {
        list.push_back(t ? std::optional<at::Tensor>(copies.host(*t)) : std::nullopt);
      }
      value(i) = list;
    }
  }
  std::vector<c10::IValue> hosts(stack->begin() + first, stack->end());

  // 4. CPU's kernel. A dtype it has no kernel for is named as ours to compute.
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  } catch (const c10::NotImplementedError& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "openreg has no kernel for ", name, " with these dtypes, and its CPU "
                                "fallback cannot compute them either: ", e.what_without_backtrace());
  }

  // 5. Written arguments back to the device; results of their own to the device.
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!is_written(arguments[i])) {
      continue;
    }
    if (originals[i].isTensor()) {
      copies.copy_to_device(originals[i].toTensor(), hosts[i].toTensor());
    } else if (originals[i].isTensorList()) {
      const auto device_list = originals[i].toTensorList();
      const auto host_list = hosts[i].toTensorList();
      for (size_t k = 0; k < device_list.size(); ++k) {
        copies.copy_to_device(device_list[k], host_list[k]);
      }
    }
  }
  copies.finish();
  const auto& returns = schema.returns();
  const size_t results = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& result = (*stack)[results + r];
    const c10::AliasInfo* alias = returns[r].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      // `Tensor(a!)`: the argument of the same alias set, which now holds the result.
      for (size_t i = 0; i < arguments.size(); ++i) {
        const c10::AliasInfo* a = arguments[i].alias_info();
        if (a != nullptr && a->beforeSets() == alias->beforeSets()) {
          result = originals[i];
          break;
        }
      }
    } else if (result.isTensor() && result.toTensor().defined()) {
      result = result.toTensor().to(device);
    } else if (result.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : result.toTensorList()) {
        list.push_back(t.defined() ? t.to(device) : t);
      }
      result = list;
    }
  }
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
    // mode's out= variant is a composite that accepts only CPU, CUDA and XPU tensors; as a
    // device kernel, the fallback runs it like every other.
    single.impl("mode.values", torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_fallback

} // namespace openreg
