// arange into an out= tensor (the functional forms create one and call this). CPU's own
// implementation runs first on a meta tensor of the same dtype: the checks, the messages and
// the size are CPU's. The Rust kernel then writes start + i * step into the device tensor.

#include "operators/Structured.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  at::Tensor meta = at::empty({0}, out.options().device(at::kMeta));
  at::arange_out(meta, start, end, step);
  if (out.sizes() != meta.sizes()) {
    out.resize_(meta.sizes());
  }
  if (out.numel() == 0) {
    return out;
  }
  const at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  const bool integral = c10::isIntegralType(out.scalar_type(), /*includeBool=*/false);
  const bool done = call([&] {
    return launch_arange(dense(target), start.to<double>(), step.to<double>(),
                         integral ? start.to<int64_t>() : 0, integral ? step.to<int64_t>() : 0,
                         out.device().index());
  });
  if (!done) {
    note_host_path("arange", out.scalar_type());
    at::Tensor host = host_alias(target);
    at::arange_out(host, start, end, step);
  }
  if (!target.is_same(out)) {
    out.copy_(target);
  }
  return out;
}

} // namespace

void register_range_factories() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("arange.start_out", TORCH_FN(arange_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
