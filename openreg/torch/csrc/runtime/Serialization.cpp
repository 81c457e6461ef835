// Backend metadata that travels with device tensors through torch.save / torch.load.
// A real backend keeps device-specific layout information here (an internal memory format,
// a compression flag); PyTorch stores it as string -> bool pairs beside the tensor.

#include "OpenReg.h"

#include <torch/csrc/jit/serialization/pickler_helper.h>

namespace openreg {
namespace {

// ANCHOR: backend_meta
struct OpenRegBackendMeta final : public c10::BackendMeta {
  OpenRegBackendMeta(int version_number, int format_number)
      : version_number(version_number), format_number(format_number) {}

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    return c10::make_intrusive<OpenRegBackendMeta>(version_number, format_number);
  }

  int version_number;
  int format_number;
};

// torch.save: the metadata of `t` as flags (the format keeps only string -> bool).
void for_serialization(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  auto* meta = dynamic_cast<OpenRegBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  if (meta == nullptr) {
    return;
  }
  if (meta->version_number == 1) {
    m["version_number"] = true;
  }
  if (meta->format_number == 29) {
    m["format_number"] = true;
  }
}

// torch.load (and torch._utils.set_tensor_metadata): flags back into metadata.
void for_deserialization(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  const int version = m.contains("version_number") ? 1 : -1;
  const int format = m.contains("format_number") ? 29 : -1;
  t.unsafeGetTensorImpl()->set_backend_meta(
      c10::make_intrusive<OpenRegBackendMeta>(version, format));
}
// ANCHOR_END: backend_meta

} // namespace

void register_serialization() {
  static bool registered =
      (torch::jit::TensorBackendMetaRegistry(kOpenReg, &for_serialization, &for_deserialization),
       true);
  (void)registered;
}

} // namespace openreg
