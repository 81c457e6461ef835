// arange into an out= tensor (the functional forms create one and call this). The size and
// its checks are CPU's own (`compute_arange_size`, ATen/native/RangeUtils.h, per dtype, as
// CPU's arange_out calls it); the Rust kernel then writes start + i * step into the device
// tensor. Language models call arange for positions once per step or generated token, so the
// size is computed here, not by running arange on a meta tensor (a Python decomposition).

#include "operators/Structured.h"

#include <ATen/Dispatch.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_openreg", [&] {
    size = at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  if (out.numel() != size) {
    if (out.numel() > 0) {
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", size,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (", size, ",).");
    }
    out.resize_({size});
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
    on_host("arange", out.scalar_type(), [&] {
      at::Tensor host = host_alias(target);
      at::arange_out(host, start, end, step);
    });
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
