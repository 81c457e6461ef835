// Weight normalization's fused operator, _weight_norm_interface (w = g * v / ||v||, the norm
// over every dimension but `dim`), and its backward, which torch._weight_norm calls for a
// first or last `dim` (torch/nn/utils/weight_norm.py, parametrizations.weight_norm). Both are
// composed of the device's own operators (a sum of squares, a square root, products), each a
// kernel on the current stream, as CPU's fused kernel computes them
// (aten/src/ATen/native/cpu/WeightNormKernel.cpp): the norm is float32 for bfloat16 weights.

#include "OpenReg.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

namespace openreg {
namespace {

// The dimensions the norm reduces: every one but `dim`.
std::vector<int64_t> reduced(const at::Tensor& v, int64_t dim) {
  TORCH_CHECK(dim == 0 || dim == v.dim() - 1,
              "fused kernels can only be applied for first or last dim, got dim ", dim,
              " for a ", v.dim(), "-dimensional weight");
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < v.dim(); ++d) {
    if (d != dim) {
      dims.push_back(d);
    }
  }
  return dims;
}

// ANCHOR: weight_norm
std::tuple<at::Tensor, at::Tensor> weight_norm(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
  const auto dims = reduced(v, dim);
  const auto norm_dtype = g.scalar_type() == at::kBFloat16 ? at::kFloat : g.scalar_type();
  // ||v|| over the reduced dimensions, kept as size-1 dimensions: g's shape.
  const at::Tensor vf = v.to(norm_dtype);
  const at::Tensor norm = (vf * vf).sum(dims, /*keepdim=*/true).sqrt_();
  const at::Tensor w = (vf * (g.to(norm_dtype) / norm)).to(v.scalar_type()).contiguous();
  at::Tensor norms = at::empty_strided(g.sizes(), g.strides(), g.options().dtype(norm_dtype));
  norms.copy_(norm.view(g.sizes()));
  return {w, norms};
}

std::tuple<at::Tensor, at::Tensor> weight_norm_backward(const at::Tensor& grad_w,
                                                        const at::Tensor& saved_v,
                                                        const at::Tensor& saved_g,
                                                        const at::Tensor& saved_norms, int64_t dim) {
  TORCH_CHECK(saved_v.is_contiguous(), "saved_v must be contiguous");
  TORCH_CHECK(saved_g.is_contiguous(), "saved_g must be contiguous");
  TORCH_CHECK(saved_norms.is_contiguous(), "saved_norms must be contiguous");
  const auto dims = reduced(saved_v, dim);
  const auto acc = saved_norms.scalar_type();
  const at::Tensor v = saved_v.to(acc), g = saved_g.to(acc), norm = saved_norms.view(saved_g.sizes());
  // d/dg: sum(grad_w * v) / ||v||; d/dv: (g / ||v||) * (grad_w - v * grad_g / ||v||).
  const at::Tensor grad_g = (grad_w.to(acc) * v).sum(dims, /*keepdim=*/true) / norm;
  const at::Tensor grad_v = (g / norm) * (grad_w.to(acc) - v * (grad_g / norm));
  return {grad_v.to(saved_v.scalar_type()).contiguous(),
          grad_g.to(saved_g.scalar_type()).view(saved_g.sizes()).contiguous()};
}
// ANCHOR_END: weight_norm

} // namespace

void register_weight_norm() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_weight_norm_interface", TORCH_FN(weight_norm));
    library.impl("_weight_norm_interface_backward", TORCH_FN(weight_norm_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
