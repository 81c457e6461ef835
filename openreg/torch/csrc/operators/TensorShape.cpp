// cat: the structured meta function checks the tensors and sizes the result (dtype promotion,
// memory format); each input is then copied into its slice of the result with the device's
// own copy kernel. LSTM and GRU stack their steps' outputs with it.

#include "operators/Structured.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/cat_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: cat
template <Variant kind>
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& given = {}) {
  // The meta function does not compare devices; the message is the one every device gives.
  std::optional<c10::Device> common;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(!common || t.device() == *common, "Expected all tensors to be on the same device, ",
                "but found at least two devices, ", *common, " and ", t.device(), "!");
    common = t.device();
  }
  Structured<at::meta::structured_cat, kind> s(given);
  const auto computed = s.meta(tensors, dim);
  const at::Tensor& out = s.maybe_get_output(0);
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      continue;  // a legacy empty tensor: cat skips it whatever dim is
    }
    const int64_t n = t.size(computed.dim);
    if (n > 0 && out.numel() > 0) {
      out.narrow(computed.dim, offset, n).copy_(t);
    }
    offset += n;
  }
  return s.result();
}
// ANCHOR_END: cat

at::Tensor cat_functional(const at::ITensorListRef& tensors, int64_t dim) {
  return cat<Variant::Functional>(tensors, dim);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  cat<Variant::Out>(tensors, dim, out);
  return out;
}

// eye: zeros, then ones along the diagonal view; both are device kernels (fill_ on a strided
// view). CPU's checks and messages.
at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  out.zero_();
  out.diagonal().fill_(1);
  return out;
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) {
  return eye_m_out(n, n, out);
}

} // namespace

void register_tensor_shape() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("cat", TORCH_FN(cat_functional));
    library.impl("cat.out", TORCH_FN(cat_out));
    library.impl("eye.out", TORCH_FN(eye_out));
    library.impl("eye.m_out", TORCH_FN(eye_m_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
