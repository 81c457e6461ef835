// 2-D and 3-D pooling with the Rust kernel (src/operators/kernels/pooling.rs). Most pooling
// operators are structured: their meta functions check the arguments and size the outputs
// (channels-last inputs get channels-last outputs), as for CPU. The others
// (max_pool3d_with_indices, _adaptive_avg_pool3d) check with CPU's shared checks
// (ATen/native/PoolingChecks.h). The kernel sees contiguous [planes, depth, height, width]
// operands, depth 1 for 2-D pooling. adaptive_avg_pool to size 1 is a mean (a reduction) before
// it gets here; other sizes come as _adaptive_avg_pool2d/3d.

#include "operators/Structured.h"

#include <ATen/native/Pool.h>
#include <ATen/ops/_adaptive_avg_pool2d.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward.h>
#include <ATen/ops/_adaptive_avg_pool3d.h>
#include <ATen/ops/_adaptive_avg_pool3d_backward.h>
#include <ATen/ops/adaptive_max_pool2d.h>
#include <ATen/ops/adaptive_max_pool2d_backward.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/adaptive_max_pool3d.h>
#include <ATen/ops/adaptive_max_pool3d_backward.h>
#include <ATen/ops/adaptive_max_pool3d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool3d_meta.h>
#include <ATen/ops/avg_pool3d.h>
#include <ATen/ops/avg_pool3d_backward.h>
#include <ATen/ops/avg_pool3d_backward_meta.h>
#include <ATen/ops/avg_pool3d_meta.h>
#include <ATen/ops/max_pool3d_with_indices.h>
#include <ATen/ops/max_pool3d_with_indices_backward.h>
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
// The window as the meta functions read it, over the last `dims` (2 or 3) dimensions: one value
// means every dimension, an empty stride means the kernel size. 2-D pooling has depth 1.
PoolShape pool_shape(const at::Tensor& input, const at::Tensor& output, at::IntArrayRef kernel,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t dims = 2) {
  auto pick = [](at::IntArrayRef v, size_t k, int64_t none) {
    return v.empty() ? none : v[v.size() == 1 ? 0 : k];
  };
  PoolShape s{};
  int64_t volume = 1;
  for (size_t d = 0; d < 3; ++d) {
    const int64_t k = static_cast<int64_t>(d) - (3 - dims);  // the argument's index; < 0: depth of 2-D
    const bool real = k >= 0;
    s.input[d] = real ? input.size(-dims + k) : 1;
    s.output[d] = real ? output.size(-dims + k) : 1;
    volume *= s.input[d];
    s.kernel[d] = real ? pick(kernel, k, 1) : 1;
    s.stride[d] = real ? pick(stride, k, s.kernel[d]) : 1;
    s.padding[d] = real ? pick(padding, k, 0) : 0;
    s.dilation[d] = real ? pick(dilation, k, 1) : 1;
  }
  s.planes = volume > 0 ? input.numel() / volume : 0;
  return s;
}
// ANCHOR_END: pool_shape

// Runs the kernel, writing each output through a contiguous temporary if it is not contiguous
// (channels-last). `outputs` come first in `operands`. False: not our dtypes.
bool run(Pool op, const PoolShape& shape, std::initializer_list<at::Tensor> outputs,
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
  if (!call([&] { return launch_pool(op, shape, {slots.data(), slots.size()}, device.index()); })) {
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
  if (!run(Pool::MaxForward, pool_shape(self, o, kernel, stride, padding, dilation), {o, i}, {self})) {
    on_host("max_pool2d_with_indices", self.scalar_type(), [&] {
      at::Tensor host_out = host_alias(o), host_indices = host_alias(i);
      at::max_pool2d_with_indices_out(host_out, host_indices, host_alias(self), kernel, stride,
                                      padding, dilation, ceil_mode);
    });
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
  if (!run(Pool::MaxBackward, shape, {grad_input}, {grad_output, indices})) {
    on_host("max_pool2d_with_indices_backward", self.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::max_pool2d_with_indices_backward_out(host, host_alias(grad_output), host_alias(self),
                                               kernel, stride, padding, dilation, ceil_mode,
                                               host_alias(indices));
    });
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
  if (!run(Pool::AvgForward, shape, {out}, {self})) {
    on_host("avg_pool2d", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::avg_pool2d_out(host, host_alias(self), kernel, stride, padding, ceil_mode,
                         count_include_pad, divisor);
    });
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
  if (!run(Pool::AvgBackward, shape, {grad_input}, {grad_output})) {
    on_host("avg_pool2d_backward", self.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::avg_pool2d_backward_out(host, host_alias(grad_output), host_alias(self), kernel, stride,
                                  padding, ceil_mode, count_include_pad, divisor);
    });
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
  // An empty plane is refused by CPU's kernel, which an empty input reaches (see launch_pool).
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
  check_adaptive(self, output_size);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 2);
  sizes.insert(sizes.end(), output_size.begin(), output_size.end());
  at::Tensor out = at::empty(sizes, self.options());
  if (!run(Pool::AdaptiveAvgForward, pool_shape(self, out, {}, {}, {}, {}), {out}, {self})) {
    on_host("_adaptive_avg_pool2d", self.scalar_type(), [&] {
      host_alias(out).copy_(at::_adaptive_avg_pool2d(host_alias(self), output_size));
    });
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
  if (!run(Pool::AdaptiveAvgBackward, pool_shape(self, grad_output, {}, {}, {}, {}),
           {grad_input}, {grad_output})) {
    on_host("_adaptive_avg_pool2d_backward", self.scalar_type(), [&] {
      host_alias(grad_input).copy_(at::_adaptive_avg_pool2d_backward(host_alias(grad_output), host_alias(self)));
    });
  }
  return grad_input;
}

// ANCHOR: pool3d
template <Variant kind>
at::Tensor avg_pool3d(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                      at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor, const at::Tensor& given = {}) {
  check_devices("avg_pool3d", {{"self", &self}, {"out", &given}});
  Structured<at::meta::structured_avg_pool3d, kind> s(given);
  s.meta(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor);
  const at::Tensor& out = s.maybe_get_output(0);
  PoolShape shape = pool_shape(self, out, kernel, stride, padding, {}, 3);
  shape.count_include_pad = count_include_pad;
  shape.divisor = divisor.value_or(0);
  if (!run(Pool::AvgForward, shape, {out}, {self})) {
    on_host("avg_pool3d", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::avg_pool3d_out(host, host_alias(self), kernel, stride, padding, ceil_mode,
                         count_include_pad, divisor);
    });
  }
  return s.result();
}
// ANCHOR_END: pool3d

template <Variant kind>
at::Tensor avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor, const at::Tensor& given = {}) {
  check_devices("avg_pool3d_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", &given}});
  Structured<at::meta::structured_avg_pool3d_backward, kind> s(given);
  s.meta(grad_output, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  PoolShape shape = pool_shape(self, grad_output, kernel, stride, padding, {}, 3);
  shape.count_include_pad = count_include_pad;
  shape.divisor = divisor.value_or(0);
  if (!run(Pool::AvgBackward, shape, {grad_input}, {grad_output})) {
    on_host("avg_pool3d_backward", self.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::avg_pool3d_backward_out(host, host_alias(grad_output), host_alias(self), kernel, stride,
                                  padding, ceil_mode, count_include_pad, divisor);
    });
  }
  return s.result();
}

// max_pool3d_with_indices has no meta function in C++: CPU's argument checks, its output size
// (ATen/native/Pool.h) and its shape check (ATen/native/PoolingChecks.h).
std::vector<int64_t> max_pool3d_size(const at::Tensor& input, at::IntArrayRef kernel,
                                     at::IntArrayRef stride, at::IntArrayRef padding,
                                     at::IntArrayRef dilation, bool ceil_mode) {
  TORCH_CHECK(kernel.size() == 1 || kernel.size() == 3,
              "max_pool3d: kernel_size must either be a single int, or a tuple of three ints")
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3,
              "max_pool3d: stride must either be omitted, a single int, or a tuple of three ints")
  TORCH_CHECK(padding.size() == 1 || padding.size() == 3,
              "max_pool3d: padding must either be a single int, or a tuple of three ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 3,
              "max_pool3d: dilation must be either a single int, or a tuple of three ints");
  TORCH_CHECK(input.dim() == 4 || input.dim() == 5,
              "non-empty 4D or 5D (batch mode) tensor expected for input");
  const PoolShape w = pool_shape(input, input, kernel, stride, padding, dilation, 3);
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - 3);
  for (size_t d = 0; d < 3; ++d) {
    sizes.push_back(at::native::pooling_output_shape<int64_t>(
        w.input[d], w.kernel[d], w.padding[d], w.stride[d], w.dilation[d], ceil_mode));
  }
  const int64_t n = static_cast<int64_t>(sizes.size());
  at::native::pool3d_shape_check(
      input, input.size(-4), w.kernel[0], w.kernel[1], w.kernel[2], w.stride[0], w.stride[1],
      w.stride[2], w.padding[0], w.padding[1], w.padding[2], w.dilation[0], w.dilation[1],
      w.dilation[2], w.input[0], w.input[1], w.input[2], sizes[n - 3], sizes[n - 2],
      sizes[n - 1], "max_pool3d_with_indices_out_cpu_template()");
  return sizes;
}

std::tuple<at::Tensor, at::Tensor> max_pool3d(const at::Tensor& self, at::IntArrayRef kernel,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, bool ceil_mode) {
  const auto sizes = max_pool3d_size(self, kernel, stride, padding, dilation, ceil_mode);
  const auto format = self.suggest_memory_format();
  at::Tensor out = at::empty(sizes, self.options().memory_format(format));
  at::Tensor indices = at::empty(sizes, self.options().dtype(at::kLong).memory_format(format));
  if (!run(Pool::MaxForward, pool_shape(self, out, kernel, stride, padding, dilation, 3),
           {out, indices}, {self})) {
    on_host("max_pool3d_with_indices", self.scalar_type(), [&] {
      at::Tensor host_out = host_alias(out), host_indices = host_alias(indices);
      at::max_pool3d_with_indices_out(host_out, host_indices, host_alias(self), kernel, stride,
                                      padding, dilation, ceil_mode);
    });
  }
  return {out, indices};
}

at::Tensor max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                               const at::Tensor& indices) {
  check_devices("max_pool3d_with_indices_backward",
                {{"grad_output", &grad_output}, {"self", &self}, {"indices", &indices}});
  const auto sizes = max_pool3d_size(self, kernel, stride, padding, dilation, ceil_mode);
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(sizes) && indices.sizes() == grad_output.sizes(),
              "max_pool3d_with_indices_backward: grad_output ", grad_output.sizes(), " and indices ",
              indices.sizes(), " do not match the pooled size ", at::IntArrayRef(sizes));
  at::Tensor grad_input = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  const PoolShape shape = pool_shape(self, grad_output, kernel, stride, padding, dilation, 3);
  if (!run(Pool::MaxBackward, shape, {grad_input}, {grad_output, indices})) {
    on_host("max_pool3d_with_indices_backward", self.scalar_type(), [&] {
      host_alias(grad_input).copy_(at::max_pool3d_with_indices_backward(
          host_alias(grad_output), host_alias(self), kernel, stride, padding, dilation, ceil_mode,
          host_alias(indices)));
    });
  }
  return grad_input;
}

// CPU's checks for _adaptive_avg_pool3d, with its messages.
at::Tensor adaptive_avg_pool3d(const at::Tensor& self, at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 3, "adaptive_avg_pool3d: output_size must be 3");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5,
              "adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got ", self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i) {
    TORCH_CHECK(self.size(i) > 0,
                "adaptive_avg_pool3d(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                self.sizes(), " with dimension ", i, " being empty");
  }
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 3);
  sizes.insert(sizes.end(), output_size.begin(), output_size.end());
  at::Tensor out = at::empty(sizes, self.options().memory_format(self.suggest_memory_format()));
  if (!run(Pool::AdaptiveAvgForward, pool_shape(self, out, {}, {}, {}, {}, 3), {out}, {self})) {
    on_host("_adaptive_avg_pool3d", self.scalar_type(), [&] {
      host_alias(out).copy_(at::_adaptive_avg_pool3d(host_alias(self), output_size));
    });
  }
  return out;
}

at::Tensor adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  check_devices("_adaptive_avg_pool3d_backward", {{"grad_output", &grad_output}, {"self", &self}});
  TORCH_CHECK(grad_output.dim() == self.dim() &&
                  grad_output.sizes().slice(0, self.dim() - 3) == self.sizes().slice(0, self.dim() - 3),
              "_adaptive_avg_pool3d_backward: grad_output of size ", grad_output.sizes(),
              " does not match input of size ", self.sizes());
  at::Tensor grad_input = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  if (!run(Pool::AdaptiveAvgBackward, pool_shape(self, grad_output, {}, {}, {}, {}, 3),
           {grad_input}, {grad_output})) {
    on_host("_adaptive_avg_pool3d_backward", self.scalar_type(), [&] {
      host_alias(grad_input).copy_(at::_adaptive_avg_pool3d_backward(host_alias(grad_output), host_alias(self)));
    });
  }
  return grad_input;
}

// adaptive_max_pool2d/3d: structured, `Meta` the operator's meta function, `dims` 2 or 3.
template <class Meta, int64_t dims, Variant kind>
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool(const at::Tensor& self, at::IntArrayRef output_size,
                                                     const at::Tensor& out = {},
                                                     const at::Tensor& indices = {}) {
  const char* name = dims == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d";
  check_devices(name, {{"self", &self}, {"out", &out}, {"indices", &indices}});
  Structured<Meta, kind> s(out, indices);
  s.meta(self, output_size);
  const at::Tensor &o = s.maybe_get_output(0), &i = s.maybe_get_output(1);
  if (!run(Pool::AdaptiveMaxForward, pool_shape(self, o, {}, {}, {}, {}, dims), {o, i}, {self})) {
    on_host(name, self.scalar_type(), [&] {
      at::Tensor host_out = host_alias(o), host_indices = host_alias(i);
      if constexpr (dims == 2) {
        at::adaptive_max_pool2d_out(host_out, host_indices, host_alias(self), output_size);
      } else {
        at::adaptive_max_pool3d_out(host_out, host_indices, host_alias(self), output_size);
      }
    });
  }
  return {s.result(0), s.result(1)};
}

template <class Meta, int64_t dims, Variant kind>
at::Tensor adaptive_max_pool_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                      const at::Tensor& indices, const at::Tensor& given = {}) {
  const char* name = dims == 2 ? "adaptive_max_pool2d_backward" : "adaptive_max_pool3d_backward";
  check_devices(name, {{"grad_output", &grad_output}, {"self", &self}, {"indices", &indices},
                       {"grad_input", &given}});
  Structured<Meta, kind> s(given);
  s.meta(grad_output, self, indices);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  if (!run(Pool::AdaptiveMaxBackward, pool_shape(self, grad_output, {}, {}, {}, {}, dims),
           {grad_input}, {grad_output, indices})) {
    on_host(name, self.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      if constexpr (dims == 2) {
        at::adaptive_max_pool2d_backward_out(host, host_alias(grad_output), host_alias(self), host_alias(indices));
      } else {
        at::adaptive_max_pool3d_backward_out(host, host_alias(grad_output), host_alias(self), host_alias(indices));
      }
    });
  }
  return s.result();
}

using AdaptiveMax2d = at::meta::structured_adaptive_max_pool2d;
using AdaptiveMax3d = at::meta::structured_adaptive_max_pool3d;
using AdaptiveMax2dBackward = at::meta::structured_adaptive_max_pool2d_backward;
using AdaptiveMax3dBackward = at::meta::structured_adaptive_max_pool3d_backward;

template <class Meta, int64_t dims>
std::tuple<at::Tensor, at::Tensor> adaptive_max_functional(const at::Tensor& self, at::IntArrayRef size) {
  return adaptive_max_pool<Meta, dims, Variant::Functional>(self, size);
}
template <class Meta, int64_t dims>
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_out(const at::Tensor& self, at::IntArrayRef size,
                                                      at::Tensor& out, at::Tensor& indices) {
  adaptive_max_pool<Meta, dims, Variant::Out>(self, size, out, indices);
  return {out, indices};
}
template <class Meta, int64_t dims>
at::Tensor adaptive_max_backward_functional(const at::Tensor& g, const at::Tensor& self, const at::Tensor& indices) {
  return adaptive_max_pool_backward<Meta, dims, Variant::Functional>(g, self, indices);
}
template <class Meta, int64_t dims>
at::Tensor& adaptive_max_backward_out(const at::Tensor& g, const at::Tensor& self, const at::Tensor& indices,
                                      at::Tensor& out) {
  adaptive_max_pool_backward<Meta, dims, Variant::Out>(g, self, indices, out);
  return out;
}
at::Tensor avg_pool3d_functional(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                 at::IntArrayRef p, bool ceil_mode, bool include_pad,
                                 std::optional<int64_t> divisor) {
  return avg_pool3d<Variant::Functional>(self, k, s, p, ceil_mode, include_pad, divisor);
}
at::Tensor& avg_pool3d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                           at::IntArrayRef p, bool ceil_mode, bool include_pad,
                           std::optional<int64_t> divisor, at::Tensor& out) {
  avg_pool3d<Variant::Out>(self, k, s, p, ceil_mode, include_pad, divisor, out);
  return out;
}
at::Tensor avg_pool3d_backward_functional(const at::Tensor& g, const at::Tensor& self,
                                          at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                                          bool ceil_mode, bool include_pad,
                                          std::optional<int64_t> divisor) {
  return avg_pool3d_backward<Variant::Functional>(g, self, k, s, p, ceil_mode, include_pad, divisor);
}
at::Tensor& avg_pool3d_backward_out(const at::Tensor& g, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef p, bool ceil_mode,
                                    bool include_pad, std::optional<int64_t> divisor,
                                    at::Tensor& out) {
  avg_pool3d_backward<Variant::Out>(g, self, k, s, p, ceil_mode, include_pad, divisor, out);
  return out;
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
    library.impl("avg_pool3d", TORCH_FN(avg_pool3d_functional));
    library.impl("avg_pool3d.out", TORCH_FN(avg_pool3d_out));
    library.impl("avg_pool3d_backward", TORCH_FN(avg_pool3d_backward_functional));
    library.impl("avg_pool3d_backward.grad_input", TORCH_FN(avg_pool3d_backward_out));
    library.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d));
    library.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_backward));
    library.impl("_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool3d));
    library.impl("_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool3d_backward));
    library.impl("adaptive_max_pool2d", TORCH_FN((adaptive_max_functional<AdaptiveMax2d, 2>)));
    library.impl("adaptive_max_pool2d.out", TORCH_FN((adaptive_max_out<AdaptiveMax2d, 2>)));
    library.impl("adaptive_max_pool2d_backward",
                 TORCH_FN((adaptive_max_backward_functional<AdaptiveMax2dBackward, 2>)));
    library.impl("adaptive_max_pool2d_backward.grad_input",
                 TORCH_FN((adaptive_max_backward_out<AdaptiveMax2dBackward, 2>)));
    library.impl("adaptive_max_pool3d", TORCH_FN((adaptive_max_functional<AdaptiveMax3d, 3>)));
    library.impl("adaptive_max_pool3d.out", TORCH_FN((adaptive_max_out<AdaptiveMax3d, 3>)));
    library.impl("adaptive_max_pool3d_backward",
                 TORCH_FN((adaptive_max_backward_functional<AdaptiveMax3dBackward, 3>)));
    library.impl("adaptive_max_pool3d_backward.grad_input",
                 TORCH_FN((adaptive_max_backward_out<AdaptiveMax3dBackward, 3>)));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
