// histc: the counts of a tensor's elements in equal bins. CPU's checks and messages; an empty
// range (min == max) becomes the data's range, found with the device's own reductions and read
// back (CPU and CUDA read it too); then a Rust kernel counts on the stream
// (src/operators/kernels/histogram.rs). Integer inputs are counted as CUDA counts them: CPU's
// kernel has no integer histogram, and libraries call histc on integers off the CPU
// (transformers' mixture-of-experts routing).

#include "operators/Structured.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/histc.h>
#include <torch/library.h>

#include <cmath>

namespace openreg {
namespace {

// ANCHOR: histc
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                      at::Tensor& out) {
  check_devices("histc_out", {{"self", &self}, {"out", &out}});
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "torch.histogram: input tensor and hist tensor should "
              "have the same dtype, but got input ", self.dtype(), " and hist ", out.dtype());
  double lo = min.toDouble(), hi = max.toDouble();
  if (lo == hi && self.numel() > 0) {
    lo = at::amin(self, {}).item<double>();  // waits for the device: the range decides the bins
    hi = at::amax(self, {}).item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  at::native::resize_output(out, {bins});
  const at::Tensor input = self.contiguous();
  const at::Tensor dst = out.is_contiguous() ? out : at::empty({bins}, out.options());
  const bool done = call([&] {
    return launch_histc(dense(input), dense(dst), bins, lo, hi, self.device().index());
  });
  if (!done) {
    on_host("histc", self.scalar_type(), [&] {
      at::Tensor host = host_alias(dst);
      at::histc_out(host, host_alias(input), bins, min, max);
    });
  }
  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
  return out;
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  at::Tensor out = at::empty({0}, self.options());
  return histc_out(self, bins, min, max, out);
}
// ANCHOR_END: histc

} // namespace

void register_summary_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("histc", TORCH_FN(histc));
    library.impl("histc.out", TORCH_FN(histc_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
