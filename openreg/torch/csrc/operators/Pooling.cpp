// 2-D pooling with the Rust kernel (src/operators/kernels/pooling.rs). max_pool2d_with_indices
// and avg_pool2d and their backwards are structured: their meta functions check the arguments
// and size the outputs (channels-last inputs get channels-last outputs), as for CPU. The kernel
// sees contiguous [planes, height, width] operands. adaptive_avg_pool2d to 1x1 is a mean (a
// reduction) before it gets here; other sizes come as _adaptive_avg_pool2d.

#include "operators/Structured.h"

#include <ATen/ops/_adaptive_avg_pool2d.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/avg_pool2d_backward.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: pool_shape
// The window as the meta functions read it: one value means both dimensions, an empty stride
// means the kernel size.
PoolShape pool_shape(const at::Tensor& input, const at::Tensor& output, at::IntArrayRef kernel,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  auto pick = [](at::IntArrayRef v, size_t k, int64_t none) {
    return v.empty() ? none : v[v.size() == 1 ? 0 : k];
  };
  PoolShape s{};
  const int64_t h = input.size(-2), w = input.size(-1);
  s.planes = h * w > 0 ? input.numel() / (h * w) : 0;
  s.input = {h, w};
  s.output = {output.size(-2), output.size(-1)};
  for (size_t k = 0; k < 2; ++k) {
    s.kernel[k] = pick(kernel, k, 1);
    s.stride[k] = pick(stride, k, s.kernel[k]);
    s.padding[k] = pick(padding, k, 0);
    s.dilation[k] = pick(dilation, k, 1);
  }
  return s;
}
// ANCHOR_END: pool_shape

// Runs the kernel, writing each output through a contiguous temporary if it is not contiguous
// (channels-last). `outputs` come first in `operands`. False: not our dtypes.
bool run(Pool2d op, const PoolShape& shape, std::initializer_list<at::Tensor> outputs,
         std::initializer_list<at::Tensor> inputs) {
  c10::SmallVector<at::Tensor, 4> keep;
  c10::SmallVector<Dense, 4> slots;
  for (const at::Tensor& t : outputs) {
    keep.push_back(t.is_contiguous() ? t : at::empty(t.sizes(), t.options()));
    slots.push_back(dense(keep.back()));
  }
  for (const at::Tensor& t : inputs) {
    keep.push_back(t.contiguous());
    slots.push_back(dense(keep.back()));
  }
  const c10::Device device = outputs.begin()->device();
  if (!call([&] { return launch_pool2d(op, shape, {slots.data(), slots.size()}, device.index()); })) {
    return false;
  }
  size_t k = 0;
  for (const at::Tensor& t : outputs) {
    if (!keep[k].is_same(t)) {
      t.copy_(keep[k]);
    }
    ++k;
  }
  return true;
}

// ANCHOR: max_pool2d
template <Variant kind>
std::tuple<at::Tensor, at::Tensor> max_pool2d(const at::Tensor& self, at::IntArrayRef kernel,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, bool ceil_mode,
                                              const at::Tensor& out = {},
                                              const at::Tensor& indices = {}) {
  check_devices("max_pool2d_with_indices", {{"self", &self}, {"out", &out}, {"indices", &indices}});
  Structured<at::meta::structured_max_pool2d_with_indices, kind> s(out, indices);
  s.meta(self, kernel, stride, padding, dilation, ceil_mode);
  const at::Tensor &o = s.maybe_get_output(0), &i = s.maybe_get_output(1);
  if (!run(Pool2d::MaxForward, pool_shape(self, o, kernel, stride, padding, dilation), {o, i}, {self})) {
    note_host_path("max_pool2d_with_indices", self.scalar_type());
    at::Tensor host_out = host_alias(o), host_indices = host_alias(i);
    at::max_pool2d_with_indices_out(host_out, host_indices, host_alias(self), kernel, stride,
                                    padding, dilation, ceil_mode);
  }
  return {s.result(0), s.result(1)};
}
// ANCHOR_END: max_pool2d

template <Variant kind>
at::Tensor max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                               const at::Tensor& indices, const at::Tensor& given = {}) {
  check_devices("max_pool2d_with_indices_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"indices", &indices},
                 {"grad_input", &given}});
  Structured<at::meta::structured_max_pool2d_with_indices_backward, kind> s(given);
  s.meta(grad_output, self, kernel, stride, padding, dilation, ceil_mode, indices);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  const PoolShape shape = pool_shape(self, grad_output, kernel, stride, padding, dilation);
  if (!run(Pool2d::MaxBackward, shape, {grad_input}, {grad_output, indices})) {
    note_host_path("max_pool2d_with_indices_backward", self.scalar_type());
    at::Tensor host = host_alias(grad_input);
    at::max_pool2d_with_indices_backward_out(host, host_alias(grad_output), host_alias(self),
                                             kernel, stride, padding, dilation, ceil_mode,
                                             host_alias(indices));
  }
  return s.result();
}

template <Variant kind>
at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                      at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor, const at::Tensor& given = {}) {
  check_devices("avg_pool2d", {{"self", &self}, {"out", &given}});
  Structured<at::meta::structured_avg_pool2d, kind> s(given);
  s.meta(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor);
  const at::Tensor& out = s.maybe_get_output(0);
  PoolShape shape = pool_shape(self, out, kernel, stride, padding, {});
  shape.count_include_pad = count_include_pad;
  shape.divisor = divisor.value_or(0);
  if (!run(Pool2d::AvgForward, shape, {out}, {self})) {
    note_host_path("avg_pool2d", self.scalar_type());
    at::Tensor host = host_alias(out);
    at::avg_pool2d_out(host, host_alias(self), kernel, stride, padding, ceil_mode,
                       count_include_pad, divisor);
  }
  return s.result();
}

template <Variant kind>
at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor, const at::Tensor& given = {}) {
  check_devices("avg_pool2d_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", &given}});
  Structured<at::meta::structured_avg_pool2d_backward, kind> s(given);
  s.meta(grad_output, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  PoolShape shape = pool_shape(self, grad_output, kernel, stride, padding, {});
  shape.count_include_pad = count_include_pad;
  shape.divisor = divisor.value_or(0);
  if (!run(Pool2d::AvgBackward, shape, {grad_input}, {grad_output})) {
    note_host_path("avg_pool2d_backward", self.scalar_type());
    at::Tensor host = host_alias(grad_input);
    at::avg_pool2d_backward_out(host, host_alias(grad_output), host_alias(self), kernel, stride,
                                padding, ceil_mode, count_include_pad, divisor);
  }
  return s.result();
}

// CPU's checks for adaptive average pooling, with its messages.
void check_adaptive(const at::Tensor& input, at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  TORCH_CHECK(output_size[0] >= 0 && output_size[1] >= 0,
              "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 ",
              "but received {", output_size[0], ", ", output_size[1], "}");
  TORCH_CHECK(input.dim() == 3 || input.dim() == 4,
              "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ", input.sizes());
  // An empty plane is refused by CPU's kernel, which an empty input reaches (see launch_pool2d).
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
  check_adaptive(self, output_size);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 2);
  sizes.insert(sizes.end(), output_size.begin(), output_size.end());
  at::Tensor out = at::empty(sizes, self.options());
  if (!run(Pool2d::AdaptiveAvgForward, pool_shape(self, out, {}, {}, {}, {}), {out}, {self})) {
    note_host_path("_adaptive_avg_pool2d", self.scalar_type());
    host_alias(out).copy_(at::_adaptive_avg_pool2d(host_alias(self), output_size));
  }
  return out;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  check_devices("_adaptive_avg_pool2d_backward", {{"grad_output", &grad_output}, {"self", &self}});
  TORCH_CHECK(grad_output.dim() == self.dim() &&
                  grad_output.sizes().slice(0, self.dim() - 2) == self.sizes().slice(0, self.dim() - 2),
              "_adaptive_avg_pool2d_backward: grad_output of size ", grad_output.sizes(),
              " does not match input of size ", self.sizes());
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  if (!run(Pool2d::AdaptiveAvgBackward, pool_shape(self, grad_output, {}, {}, {}, {}),
           {grad_input}, {grad_output})) {
    note_host_path("_adaptive_avg_pool2d_backward", self.scalar_type());
    host_alias(grad_input).copy_(at::_adaptive_avg_pool2d_backward(host_alias(grad_output), host_alias(self)));
  }
  return grad_input;
}

// The operator's variants, as registered.
std::tuple<at::Tensor, at::Tensor> max_pool2d_functional(const at::Tensor& self,
                                                         at::IntArrayRef k, at::IntArrayRef s,
                                                         at::IntArrayRef p, at::IntArrayRef d,
                                                         bool ceil_mode) {
  return max_pool2d<Variant::Functional>(self, k, s, p, d, ceil_mode);
}
std::tuple<at::Tensor&, at::Tensor&> max_pool2d_out(const at::Tensor& self, at::IntArrayRef k,
                                                    at::IntArrayRef s, at::IntArrayRef p,
                                                    at::IntArrayRef d, bool ceil_mode,
                                                    at::Tensor& out, at::Tensor& indices) {
  max_pool2d<Variant::Out>(self, k, s, p, d, ceil_mode, out, indices);
  return {out, indices};
}
at::Tensor max_pool2d_backward_functional(const at::Tensor& g, const at::Tensor& self,
                                          at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                          at::IntArrayRef d, bool ceil_mode,
                                          const at::Tensor& indices) {
  return max_pool2d_backward<Variant::Functional>(g, self, k, s, p, d, ceil_mode, indices);
}
at::Tensor& max_pool2d_backward_out(const at::Tensor& g, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef p, at::IntArrayRef d,
                                    bool ceil_mode, const at::Tensor& indices, at::Tensor& out) {
  max_pool2d_backward<Variant::Out>(g, self, k, s, p, d, ceil_mode, indices, out);
  return out;
}
at::Tensor avg_pool2d_functional(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                 at::IntArrayRef p, bool ceil_mode, bool include_pad,
                                 std::optional<int64_t> divisor) {
  return avg_pool2d<Variant::Functional>(self, k, s, p, ceil_mode, include_pad, divisor);
}
at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                           at::IntArrayRef p, bool ceil_mode, bool include_pad,
                           std::optional<int64_t> divisor, at::Tensor& out) {
  avg_pool2d<Variant::Out>(self, k, s, p, ceil_mode, include_pad, divisor, out);
  return out;
}
at::Tensor avg_pool2d_backward_functional(const at::Tensor& g, const at::Tensor& self,
                                          at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                          bool ceil_mode, bool include_pad,
                                          std::optional<int64_t> divisor) {
  return avg_pool2d_backward<Variant::Functional>(g, self, k, s, p, ceil_mode, include_pad, divisor);
}
at::Tensor& avg_pool2d_backward_out(const at::Tensor& g, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef p, bool ceil_mode,
                                    bool include_pad, std::optional<int64_t> divisor,
                                    at::Tensor& out) {
  avg_pool2d_backward<Variant::Out>(g, self, k, s, p, ceil_mode, include_pad, divisor, out);
  return out;
}

} // namespace

void register_pooling() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_functional));
    library.impl("max_pool2d_with_indices.out", TORCH_FN(max_pool2d_out));
    library.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_backward_functional));
    library.impl("max_pool2d_with_indices_backward.grad_input", TORCH_FN(max_pool2d_backward_out));
    library.impl("avg_pool2d", TORCH_FN(avg_pool2d_functional));
    library.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
    library.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward_functional));
    library.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
    library.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
    library.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
