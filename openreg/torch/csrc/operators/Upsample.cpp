// 2-D resizing with the Rust kernel (src/operators/kernels/upsample.rs): upsample_nearest2d,
// _upsample_nearest_exact2d (interpolate's "nearest-exact") and upsample_bilinear2d, forward
// and backward. All six are structured: the meta functions check the arguments and size the
// outputs (a channels-last input gets a channels-last output), as for CPU. The kernel sees
// contiguous [planes, height, width] operands; a channels-last output is written through a
// contiguous temporary.

#include "operators/Structured.h"

#include <ATen/ops/_upsample_nearest_exact2d.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/upsample_bilinear2d.h>
#include <ATen/ops/upsample_bilinear2d_backward.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_nearest2d.h>
#include <ATen/ops/upsample_nearest2d_backward.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: resize
// Runs the kernel from `source` into `target` ([N, C, H, W] each); `small` is the input-sized
// side (forward: source; backward: target). False: not our dtypes.
bool run_resize(Resize mode, bool backward, const at::Tensor& target, const at::Tensor& source,
                bool align_corners, std::optional<double> scales_h, std::optional<double> scales_w) {
  const at::Tensor& small = backward ? target : source;
  const at::Tensor& large = backward ? source : target;
  ResizeShape shape{};
  shape.planes = small.size(0) * small.size(1);
  shape.input = {small.size(2), small.size(3)};
  shape.output = {large.size(2), large.size(3)};
  // The factors the caller gave, 0 when absent (the kernel uses input / output then).
  shape.scales = {scales_h.value_or(0.0), scales_w.value_or(0.0)};
  shape.align_corners = align_corners;
  shape.backward = backward;
  const at::Tensor out = target.is_contiguous() ? target : at::empty(target.sizes(), target.options());
  const at::Tensor in = source.contiguous();
  if (!call([&] { return launch_resize(mode, shape, dense(out), dense(in), target.device().index()); })) {
    return false;
  }
  if (!out.is_same(target)) {
    target.copy_(out);
  }
  return true;
}
// ANCHOR_END: resize

template <Variant kind>
at::Tensor nearest2d(const at::Tensor& self, at::IntArrayRef output_size,
                     std::optional<double> scales_h, std::optional<double> scales_w,
                     const at::Tensor& given = {}) {
  check_devices("upsample_nearest2d", {{"self", &self}, {"out", &given}});
  Structured<at::meta::structured_upsample_nearest2d, kind> s(given);
  s.meta(self, output_size, scales_h, scales_w);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_resize(Resize::Nearest, false, out, self, false, scales_h, scales_w)) {
    on_host("upsample_nearest2d", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::upsample_nearest2d_out(host, host_alias(self), output_size, scales_h, scales_w);
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor nearest2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                              at::IntArrayRef input_size, std::optional<double> scales_h,
                              std::optional<double> scales_w, const at::Tensor& given = {}) {
  check_devices("upsample_nearest2d_backward", {{"grad_output", &grad_output}, {"grad_input", &given}});
  Structured<at::meta::structured_upsample_nearest2d_backward, kind> s(given);
  s.meta(grad_output, output_size, input_size, scales_h, scales_w);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  if (!run_resize(Resize::Nearest, true, grad_input, grad_output, false, scales_h, scales_w)) {
    on_host("upsample_nearest2d_backward", grad_output.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::upsample_nearest2d_backward_out(host, host_alias(grad_output), output_size, input_size,
                                          scales_h, scales_w);
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor nearest_exact2d(const at::Tensor& self, at::IntArrayRef output_size,
                           std::optional<double> scales_h, std::optional<double> scales_w,
                           const at::Tensor& given = {}) {
  check_devices("_upsample_nearest_exact2d", {{"self", &self}, {"out", &given}});
  Structured<at::meta::structured__upsample_nearest_exact2d, kind> s(given);
  s.meta(self, output_size, scales_h, scales_w);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_resize(Resize::NearestExact, false, out, self, false, scales_h, scales_w)) {
    on_host("_upsample_nearest_exact2d", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::_upsample_nearest_exact2d_out(host, host_alias(self), output_size, scales_h, scales_w);
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor nearest_exact2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                    at::IntArrayRef input_size, std::optional<double> scales_h,
                                    std::optional<double> scales_w, const at::Tensor& given = {}) {
  check_devices("_upsample_nearest_exact2d_backward",
                {{"grad_output", &grad_output}, {"grad_input", &given}});
  Structured<at::meta::structured__upsample_nearest_exact2d_backward, kind> s(given);
  s.meta(grad_output, output_size, input_size, scales_h, scales_w);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  if (!run_resize(Resize::NearestExact, true, grad_input, grad_output, false, scales_h, scales_w)) {
    on_host("_upsample_nearest_exact2d_backward", grad_output.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::_upsample_nearest_exact2d_backward_out(host, host_alias(grad_output), output_size,
                                                 input_size, scales_h, scales_w);
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor bilinear2d(const at::Tensor& self, at::IntArrayRef output_size, bool align_corners,
                      std::optional<double> scales_h, std::optional<double> scales_w,
                      const at::Tensor& given = {}) {
  check_devices("upsample_bilinear2d", {{"self", &self}, {"out", &given}});
  Structured<at::meta::structured_upsample_bilinear2d, kind> s(given);
  s.meta(self, output_size, align_corners, scales_h, scales_w);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_resize(Resize::Bilinear, false, out, self, align_corners, scales_h, scales_w)) {
    on_host("upsample_bilinear2d", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::upsample_bilinear2d_out(host, host_alias(self), output_size, align_corners, scales_h,
                                  scales_w);
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor bilinear2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                               at::IntArrayRef input_size, bool align_corners,
                               std::optional<double> scales_h, std::optional<double> scales_w,
                               const at::Tensor& given = {}) {
  check_devices("upsample_bilinear2d_backward", {{"grad_output", &grad_output}, {"grad_input", &given}});
  Structured<at::meta::structured_upsample_bilinear2d_backward, kind> s(given);
  s.meta(grad_output, output_size, input_size, align_corners, scales_h, scales_w);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  if (!run_resize(Resize::Bilinear, true, grad_input, grad_output, align_corners, scales_h, scales_w)) {
    on_host("upsample_bilinear2d_backward", grad_output.scalar_type(), [&] {
      at::Tensor host = host_alias(grad_input);
      at::upsample_bilinear2d_backward_out(host, host_alias(grad_output), output_size, input_size,
                                           align_corners, scales_h, scales_w);
    });
  }
  return s.result();
}

// The registered signatures: functional, and out= with the output last.
at::Tensor nearest2d_functional(const at::Tensor& self, at::IntArrayRef size,
                                std::optional<double> h, std::optional<double> w) {
  return nearest2d<Variant::Functional>(self, size, h, w);
}
at::Tensor& nearest2d_out(const at::Tensor& self, at::IntArrayRef size, std::optional<double> h,
                          std::optional<double> w, at::Tensor& out) {
  nearest2d<Variant::Out>(self, size, h, w, out);
  return out;
}
at::Tensor nearest2d_backward_functional(const at::Tensor& g, at::IntArrayRef size,
                                         at::IntArrayRef input_size, std::optional<double> h,
                                         std::optional<double> w) {
  return nearest2d_backward<Variant::Functional>(g, size, input_size, h, w);
}
at::Tensor& nearest2d_backward_out(const at::Tensor& g, at::IntArrayRef size,
                                   at::IntArrayRef input_size, std::optional<double> h,
                                   std::optional<double> w, at::Tensor& grad_input) {
  nearest2d_backward<Variant::Out>(g, size, input_size, h, w, grad_input);
  return grad_input;
}
at::Tensor nearest_exact2d_functional(const at::Tensor& self, at::IntArrayRef size,
                                      std::optional<double> h, std::optional<double> w) {
  return nearest_exact2d<Variant::Functional>(self, size, h, w);
}
at::Tensor& nearest_exact2d_out(const at::Tensor& self, at::IntArrayRef size,
                                std::optional<double> h, std::optional<double> w, at::Tensor& out) {
  nearest_exact2d<Variant::Out>(self, size, h, w, out);
  return out;
}
at::Tensor nearest_exact2d_backward_functional(const at::Tensor& g, at::IntArrayRef size,
                                               at::IntArrayRef input_size,
                                               std::optional<double> h, std::optional<double> w) {
  return nearest_exact2d_backward<Variant::Functional>(g, size, input_size, h, w);
}
at::Tensor& nearest_exact2d_backward_out(const at::Tensor& g, at::IntArrayRef size,
                                         at::IntArrayRef input_size, std::optional<double> h,
                                         std::optional<double> w, at::Tensor& grad_input) {
  nearest_exact2d_backward<Variant::Out>(g, size, input_size, h, w, grad_input);
  return grad_input;
}
at::Tensor bilinear2d_functional(const at::Tensor& self, at::IntArrayRef size, bool align,
                                 std::optional<double> h, std::optional<double> w) {
  return bilinear2d<Variant::Functional>(self, size, align, h, w);
}
at::Tensor& bilinear2d_out(const at::Tensor& self, at::IntArrayRef size, bool align,
                           std::optional<double> h, std::optional<double> w, at::Tensor& out) {
  bilinear2d<Variant::Out>(self, size, align, h, w, out);
  return out;
}
at::Tensor bilinear2d_backward_functional(const at::Tensor& g, at::IntArrayRef size,
                                          at::IntArrayRef input_size, bool align,
                                          std::optional<double> h, std::optional<double> w) {
  return bilinear2d_backward<Variant::Functional>(g, size, input_size, align, h, w);
}
at::Tensor& bilinear2d_backward_out(const at::Tensor& g, at::IntArrayRef size,
                                    at::IntArrayRef input_size, bool align,
                                    std::optional<double> h, std::optional<double> w,
                                    at::Tensor& grad_input) {
  bilinear2d_backward<Variant::Out>(g, size, input_size, align, h, w, grad_input);
  return grad_input;
}

} // namespace

void register_upsample() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("upsample_nearest2d", TORCH_FN(nearest2d_functional));
    library.impl("upsample_nearest2d.out", TORCH_FN(nearest2d_out));
    library.impl("upsample_nearest2d_backward", TORCH_FN(nearest2d_backward_functional));
    library.impl("upsample_nearest2d_backward.grad_input", TORCH_FN(nearest2d_backward_out));
    library.impl("_upsample_nearest_exact2d", TORCH_FN(nearest_exact2d_functional));
    library.impl("_upsample_nearest_exact2d.out", TORCH_FN(nearest_exact2d_out));
    library.impl("_upsample_nearest_exact2d_backward", TORCH_FN(nearest_exact2d_backward_functional));
    library.impl("_upsample_nearest_exact2d_backward.grad_input", TORCH_FN(nearest_exact2d_backward_out));
    library.impl("upsample_bilinear2d", TORCH_FN(bilinear2d_functional));
    library.impl("upsample_bilinear2d.out", TORCH_FN(bilinear2d_out));
    library.impl("upsample_bilinear2d_backward", TORCH_FN(bilinear2d_backward_functional));
    library.impl("upsample_bilinear2d_backward.grad_input", TORCH_FN(bilinear2d_backward_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
