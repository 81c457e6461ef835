// Kernels for another library's operators: torchvision's detection operators (nms, roi_align,
// roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d and the backwards its autograd functions
// call). torchvision defines them in its own namespace (TORCH_LIBRARY(torchvision, m) in its
// _C library) and registers kernels for CPU and CUDA; a device adds its own for the same
// operators with a library fragment for its dispatch key, exactly as for ATen's. The
// registration may come before torchvision's definitions: the dispatcher keeps the kernels and
// checks them against each schema when torchvision is imported. torchvision's Autograd kernels
// (registered for every device) and its fake-tensor functions (Python) then apply as they are.
//
// The sampling passes run as Rust kernels (roi.rs, nms.rs, deform_conv.rs) on the current
// stream; deform_conv2d's products with the weight are the device's own matrix products. A
// dtype our kernels do not compute in (float64, bfloat16) runs torchvision's CPU kernel
// through the fallback, so both its values and its errors are CPU's. nms computes in float32
// only, as CPU's nms has no float16 kernel.

#include "operators/Structured.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

namespace openreg {

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);  // Fallback.cpp

namespace {

// ANCHOR: on_cpu
// Runs torchvision operator `name` through the fallback (its CPU kernel over host copies) and
// returns its results, for the dtypes our kernels do not take.
template <class Result>
Result returned(torch::jit::Stack& stack) {
  if constexpr (std::is_same_v<Result, at::Tensor>) {
    return stack.at(0).toTensor();
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Result{stack.at(I).toTensor()...};
    }(std::make_index_sequence<std::tuple_size_v<Result>>{});
  }
}

template <class Result, class... Args>
Result on_cpu(const char* name, const Args&... args) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack;
  (stack.emplace_back(args), ...);
  run_on_cpu(op, &stack);
  return returned<Result>(stack);
}
// ANCHOR_END: on_cpu

bool ours(const at::Tensor& t, bool half = true) {
  return t.scalar_type() == at::kFloat || (half && t.scalar_type() == at::kHalf);
}

// ---- roi_align, roi_pool, ps_roi_align, ps_roi_pool ----

RoiShape roi_shape(const at::Tensor& rois, int64_t batch, int64_t channels, int64_t height,
                   int64_t width, int64_t pooled_height, int64_t pooled_width,
                   double spatial_scale, int64_t sampling_ratio = 0, bool aligned = false) {
  RoiShape s{};
  s.rois = rois.size(0);
  s.batch = batch;
  s.channels = channels;
  s.height = height;
  s.width = width;
  s.pooled = {pooled_height, pooled_width};
  s.spatial_scale = spatial_scale;
  s.sampling_ratio = sampling_ratio;
  s.aligned = aligned;
  return s;
}

// The checks torchvision's kernels make, with their messages, and those the shape needs.
void check_roi_args(const char* op, const at::Tensor& features, const char* features_name,
                    const at::Tensor& rois, int64_t pooled_height, int64_t pooled_width) {
  check_devices(op, {{features_name, &features}, {"rois", &rois}});
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, "rois must have shape as Tensor[K, 5], got ",
              rois.sizes());
  TORCH_CHECK(features.scalar_type() == rois.scalar_type(), features_name,
              " should have the same type as rois, got ", features.scalar_type(), " and ",
              rois.scalar_type());
  TORCH_CHECK(features.dim() == 4, op, ": expected a 4-D ", features_name, ", got ",
              features.sizes());
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, op,
              ": the output size must be positive, got ", pooled_height, "x", pooled_width);
}

// Launches a forward: `mapping` is roi_pool's argmax or the channel mapping (undefined for
// roi_align). False: not our dtypes.
bool roi_forward(RoiOp op, const RoiShape& shape, const at::Tensor& out, const at::Tensor& mapping,
                 const at::Tensor& input, const at::Tensor& rois) {
  const at::Tensor x = input.contiguous(), boxes = rois.contiguous();
  const std::array<Dense, 4> operands{dense(out), dense(mapping), dense(x), dense(boxes)};
  return call([&] { return launch_roi(op, false, shape, {operands.data(), 4}, out.device().index()); });
}

bool roi_backward(RoiOp op, const RoiShape& shape, const at::Tensor& grad_input,
                  const at::Tensor& mapping, const at::Tensor& grad, const at::Tensor& rois) {
  const at::Tensor g = grad.contiguous(), boxes = rois.contiguous();
  const std::array<Dense, 4> operands{dense(grad_input), dense(mapping), dense(g), dense(boxes)};
  return call([&] { return launch_roi(op, true, shape, {operands.data(), 4}, grad_input.device().index()); });
}

// ANCHOR: roi_align
at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                     int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                     bool aligned) {
  check_roi_args("roi_align", input, "input", rois, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, input.size(0), input.size(1), input.size(2), input.size(3),
                                   pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned);
  at::Tensor out = at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, input.options());
  if (!ours(input) || !roi_forward(RoiOp::Align, shape, out, {}, input, rois)) {
    return on_cpu<at::Tensor>("torchvision::roi_align", input, rois, spatial_scale, pooled_height,
                              pooled_width, sampling_ratio, aligned);
  }
  return out;
}
// ANCHOR_END: roi_align

at::Tensor roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                              int64_t pooled_height, int64_t pooled_width, int64_t batch_size,
                              int64_t channels, int64_t height, int64_t width,
                              int64_t sampling_ratio, bool aligned) {
  check_roi_args("_roi_align_backward", grad, "grad", rois, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, batch_size, channels, height, width, pooled_height,
                                   pooled_width, spatial_scale, sampling_ratio, aligned);
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (!ours(grad) || !roi_backward(RoiOp::Align, shape, grad_input, {}, grad, rois)) {
    return on_cpu<at::Tensor>("torchvision::_roi_align_backward", grad, rois, spatial_scale,
                              pooled_height, pooled_width, batch_size, channels, height, width,
                              sampling_ratio, aligned);
  }
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                            double spatial_scale, int64_t pooled_height,
                                            int64_t pooled_width) {
  check_roi_args("roi_pool", input, "input", rois, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, input.size(0), input.size(1), input.size(2), input.size(3),
                                   pooled_height, pooled_width, spatial_scale);
  const std::vector<int64_t> sizes{rois.size(0), input.size(1), pooled_height, pooled_width};
  at::Tensor out = at::empty(sizes, input.options());
  at::Tensor argmax = at::empty(sizes, input.options().dtype(at::kInt));
  if (!ours(input) || !roi_forward(RoiOp::Pool, shape, out, argmax, input, rois)) {
    return on_cpu<std::tuple<at::Tensor, at::Tensor>>("torchvision::roi_pool", input, rois,
                                                      spatial_scale, pooled_height, pooled_width);
  }
  return {out, argmax};
}

at::Tensor roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                             double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                             int64_t batch_size, int64_t channels, int64_t height, int64_t width) {
  check_roi_args("_roi_pool_backward", grad, "grad", rois, pooled_height, pooled_width);
  check_devices("_roi_pool_backward", {{"grad", &grad}, {"argmax", &argmax}});
  const RoiShape shape = roi_shape(rois, batch_size, channels, height, width, pooled_height,
                                   pooled_width, spatial_scale);
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  const at::Tensor mapping = argmax.contiguous();
  if (!ours(grad) || !roi_backward(RoiOp::Pool, shape, grad_input, mapping, grad, rois)) {
    return on_cpu<at::Tensor>("torchvision::_roi_pool_backward", grad, rois, argmax, spatial_scale,
                              pooled_height, pooled_width, batch_size, channels, height, width);
  }
  return grad_input;
}

// The position-sensitive operators pool each bin from its own group of channels.
int64_t sensitive_channels(const at::Tensor& input, int64_t pooled_height, int64_t pooled_width) {
  TORCH_CHECK(input.size(1) % (pooled_height * pooled_width) == 0,
              "input channels must be a multiple of pooling height * pooling width, got ",
              input.size(1), " channels for ", pooled_height, "x", pooled_width, " bins");
  return input.size(1) / (pooled_height * pooled_width);
}

std::tuple<at::Tensor, at::Tensor> ps_roi_align(const at::Tensor& input, const at::Tensor& rois,
                                                double spatial_scale, int64_t pooled_height,
                                                int64_t pooled_width, int64_t sampling_ratio) {
  check_roi_args("ps_roi_align", input, "input", rois, pooled_height, pooled_width);
  const int64_t out_channels = sensitive_channels(input, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, input.size(0), input.size(1), input.size(2), input.size(3),
                                   pooled_height, pooled_width, spatial_scale, sampling_ratio);
  const std::vector<int64_t> sizes{rois.size(0), out_channels, pooled_height, pooled_width};
  at::Tensor out = at::empty(sizes, input.options());
  at::Tensor mapping = at::empty(sizes, input.options().dtype(at::kInt));
  if (!ours(input) || !roi_forward(RoiOp::PsAlign, shape, out, mapping, input, rois)) {
    return on_cpu<std::tuple<at::Tensor, at::Tensor>>("torchvision::ps_roi_align", input, rois,
                                                      spatial_scale, pooled_height, pooled_width,
                                                      sampling_ratio);
  }
  return {out, mapping};
}

// The backwards of the position-sensitive operators do not read the channel mapping: the
// channel a bin reads is a function of its position (roi.rs), which the forward wrote out.
at::Tensor ps_roi_align_backward(const at::Tensor& grad, const at::Tensor& rois,
                                 const at::Tensor& channel_mapping, double spatial_scale,
                                 int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio,
                                 int64_t batch_size, int64_t channels, int64_t height, int64_t width) {
  check_roi_args("_ps_roi_align_backward", grad, "grad", rois, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, batch_size, channels, height, width, pooled_height,
                                   pooled_width, spatial_scale, sampling_ratio);
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (!ours(grad) || !roi_backward(RoiOp::PsAlign, shape, grad_input, {}, grad, rois)) {
    return on_cpu<at::Tensor>("torchvision::_ps_roi_align_backward", grad, rois, channel_mapping,
                              spatial_scale, pooled_height, pooled_width, sampling_ratio,
                              batch_size, channels, height, width);
  }
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                               double spatial_scale, int64_t pooled_height,
                                               int64_t pooled_width) {
  check_roi_args("ps_roi_pool", input, "input", rois, pooled_height, pooled_width);
  const int64_t out_channels = sensitive_channels(input, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, input.size(0), input.size(1), input.size(2), input.size(3),
                                   pooled_height, pooled_width, spatial_scale);
  const std::vector<int64_t> sizes{rois.size(0), out_channels, pooled_height, pooled_width};
  at::Tensor out = at::empty(sizes, input.options());
  at::Tensor mapping = at::empty(sizes, input.options().dtype(at::kInt));
  if (!ours(input) || !roi_forward(RoiOp::PsPool, shape, out, mapping, input, rois)) {
    return on_cpu<std::tuple<at::Tensor, at::Tensor>>("torchvision::ps_roi_pool", input, rois,
                                                      spatial_scale, pooled_height, pooled_width);
  }
  return {out, mapping};
}

at::Tensor ps_roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois,
                                const at::Tensor& channel_mapping, double spatial_scale,
                                int64_t pooled_height, int64_t pooled_width, int64_t batch_size,
                                int64_t channels, int64_t height, int64_t width) {
  check_roi_args("_ps_roi_pool_backward", grad, "grad", rois, pooled_height, pooled_width);
  const RoiShape shape = roi_shape(rois, batch_size, channels, height, width, pooled_height,
                                   pooled_width, spatial_scale);
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (!ours(grad) || !roi_backward(RoiOp::PsPool, shape, grad_input, {}, grad, rois)) {
    return on_cpu<at::Tensor>("torchvision::_ps_roi_pool_backward", grad, rois, channel_mapping,
                              spatial_scale, pooled_height, pooled_width, batch_size, channels,
                              height, width);
  }
  return grad_input;
}

// ---- nms ----

// ANCHOR: nms
at::Tensor nms(const at::Tensor& dets, const at::Tensor& scores, double iou_threshold) {
  check_devices("nms", {{"dets", &dets}, {"scores", &scores}});
  TORCH_CHECK(dets.dim() == 2, "boxes should be a 2d tensor, got ", dets.dim(), "D");
  TORCH_CHECK(dets.size(1) == 4, "boxes should have 4 elements in dimension 1, got ", dets.size(1));
  TORCH_CHECK(scores.dim() == 1, "scores should be a 1d tensor, got ", scores.dim(), "D");
  TORCH_CHECK(dets.size(0) == scores.size(0),
              "boxes and scores should have same number of elements in dimension 0, got ",
              dets.size(0), " and ", scores.size(0));
  TORCH_CHECK(dets.scalar_type() == scores.scalar_type(),
              "dets should have the same type as scores, got ", dets.scalar_type(), " and ",
              scores.scalar_type());
  if (!ours(dets, false)) {
    return on_cpu<at::Tensor>("torchvision::nms", dets, scores, iou_threshold);
  }
  const int64_t n = dets.size(0);
  if (n == 0) {
    return at::empty({0}, dets.options().dtype(at::kLong));
  }
  // Descending score order, ties in index order: a sort on the device.
  const at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, 0, /*descending=*/true));
  const at::Tensor boxes = dets.contiguous();
  at::Tensor keep = at::empty({n}, dets.options().dtype(at::kLong));
  at::Tensor count = at::empty({1}, dets.options().dtype(at::kLong));
  call([&] {
    return launch_nms(dense(boxes), dense(order), dense(keep), dense(count), iou_threshold,
                      dets.device().index());
  });
  // The result's length is data: reading it waits for the kernel, as CUDA's nms waits for its
  // mask.
  return keep.narrow(0, 0, count.item<int64_t>());
}
// ANCHOR_END: nms

// ---- deform_conv2d ----

struct Deformable {
  DeformShape shape{};
  int64_t out_channels = 0, groups = 1;
};

// torchvision's checks (deform_conv2d_kernel.cpp), with its messages, and the sizes.
Deformable deformable(const char* op, const at::Tensor& input, const at::Tensor& weight,
                      const at::Tensor& offset, const at::Tensor& mask, const at::Tensor& bias,
                      int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                      int64_t dilation_h, int64_t dilation_w, int64_t groups,
                      int64_t offset_groups, bool use_mask) {
  check_devices(op, {{"input", &input}, {"weight", &weight}, {"offset", &offset}, {"mask", &mask},
                     {"bias", &bias}});
  for (const at::Tensor* t : {&weight, &offset, &mask, &bias}) {
    TORCH_CHECK(t->scalar_type() == input.scalar_type(), op, ": expected every operand in ",
                input.scalar_type(), ", got ", t->scalar_type());
  }
  TORCH_CHECK(input.dim() == 4, op, ": expected a 4-D input, got ", input.sizes());
  TORCH_CHECK(offset.dim() == 4, op, ": expected a 4-D offset, got ", offset.sizes());
  TORCH_CHECK(!use_mask || mask.dim() == 4, op, ": expected a 4-D mask, got ", mask.sizes());
  TORCH_CHECK(weight.dim() == 4, op, ": expected a 4-D weight, got ", weight.sizes());
  const int64_t kh = weight.size(2), kw = weight.size(3);
  TORCH_CHECK(kh > 0 && kw > 0, "weight_h: ", kh, " weight_w: ", kw);
  TORCH_CHECK(stride_h > 0 && stride_w > 0, "stride_h: ", stride_h, " stride_w: ", stride_w);
  TORCH_CHECK(pad_h >= 0 && pad_w >= 0, "pad_h: ", pad_h, " pad_w: ", pad_w);
  TORCH_CHECK(dilation_h > 0 && dilation_w > 0, "dilation_h: ", dilation_h, " dilation_w: ", dilation_w);
  TORCH_CHECK(groups > 0 && offset_groups > 0, op, ": groups and offset groups must be positive, got ",
              groups, " and ", offset_groups);
  TORCH_CHECK(weight.size(1) * groups == input.size(1), op, ": weight has ", weight.size(1),
              " input channels per group, ", groups, " groups, for an input of ", input.size(1),
              " channels");
  TORCH_CHECK(weight.size(0) % groups == 0, op, ": ", weight.size(0),
              " output channels do not split into ", groups, " groups");
  TORCH_CHECK(offset.size(1) == offset_groups * 2 * kh * kw, "offset.shape[1] is not valid: got: ",
              offset.size(1), " expected: ", offset_groups * 2 * kh * kw);
  TORCH_CHECK(!use_mask || mask.size(1) == offset_groups * kh * kw,
              "mask.shape[1] is not valid: got: ", mask.size(1), " expected: ",
              offset_groups * kh * kw);
  TORCH_CHECK(input.size(1) % offset_groups == 0, op, ": ", input.size(1),
              " input channels do not split into ", offset_groups, " offset groups");
  TORCH_CHECK(offset.size(0) == input.size(0), "invalid batch size of offset");
  const int64_t out_h = (input.size(2) + 2 * pad_h - (dilation_h * (kh - 1) + 1)) / stride_h + 1;
  const int64_t out_w = (input.size(3) + 2 * pad_w - (dilation_w * (kw - 1) + 1)) / stride_w + 1;
  TORCH_CHECK(offset.size(2) == out_h && offset.size(3) == out_w, "offset output dims: (",
              offset.size(2), ", ", offset.size(3), ") - computed output dims: (", out_h, ", ",
              out_w, ")");
  TORCH_CHECK(mask.size(0) == input.size(0), "invalid batch size of mask");
  TORCH_CHECK(!use_mask || (mask.size(2) == out_h && mask.size(3) == out_w), "mask output dims: (",
              mask.size(2), ", ", mask.size(3), ") - computed output dims: (", out_h, ", ", out_w, ")");
  TORCH_CHECK(out_h > 0 && out_w > 0, "Calculated output size too small - out_h: ", out_h,
              " out_w: ", out_w);
  TORCH_CHECK(bias.numel() == weight.size(0), op, ": expected a bias of ", weight.size(0),
              " elements, got ", bias.sizes());
  Deformable d;
  d.shape.batch = input.size(0);
  d.shape.channels = input.size(1);
  d.shape.height = input.size(2);
  d.shape.width = input.size(3);
  d.shape.kernel = {kh, kw};
  d.shape.stride = {stride_h, stride_w};
  d.shape.padding = {pad_h, pad_w};
  d.shape.dilation = {dilation_h, dilation_w};
  d.shape.offset_groups = offset_groups;
  d.shape.out = {out_h, out_w};
  d.shape.use_mask = use_mask;
  d.out_channels = weight.size(0);
  d.groups = groups;
  return d;
}

bool deform_pass(DeformPass pass, const DeformShape& shape, std::initializer_list<at::Tensor> operands) {
  std::vector<Dense> slots;
  for (const at::Tensor& t : operands) {
    slots.push_back(dense(t));
  }
  const int64_t device = operands.begin()->device().index();
  return call([&] { return launch_deform(pass, shape, {slots.data(), slots.size()}, device); });
}

// ANCHOR: deform_conv2d
at::Tensor deform_conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                         const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h,
                         int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                         int64_t dilation_w, int64_t groups, int64_t offset_groups, bool use_mask) {
  const Deformable d = deformable("deform_conv2d", input, weight, offset, mask, bias, stride_h,
                                  stride_w, pad_h, pad_w, dilation_h, dilation_w, groups,
                                  offset_groups, use_mask);
  const DeformShape& s = d.shape;
  const int64_t positions = s.batch * s.out[0] * s.out[1];
  if (!ours(input)) {
    return on_cpu<at::Tensor>("torchvision::deform_conv2d", input, weight, offset, mask, bias,
                              stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups,
                              offset_groups, use_mask);
  }
  if (positions == 0 || s.channels == 0) {
    return at::zeros({s.batch, d.out_channels, s.out[0], s.out[1]}, input.options()) +
           bias.view({1, d.out_channels, 1, 1});
  }
  // The sampled input: one row per (input channel, kernel tap), one column per output position.
  const at::Tensor x = input.contiguous(), off = offset.contiguous();
  const at::Tensor m = use_mask ? mask.contiguous() : at::Tensor();
  at::Tensor columns = at::empty({s.channels * s.kernel[0] * s.kernel[1], positions}, input.options());
  deform_pass(DeformPass::Im2col, s, {columns, x, off, m});
  // Per group, weight [out/g, in/g * taps] times that group's columns: a convolution's GEMM.
  const at::Tensor w = weight.contiguous().view({d.groups, d.out_channels / d.groups, -1});
  const at::Tensor out = at::bmm(w, columns.view({d.groups, -1, positions}));
  return (out.view({d.out_channels, s.batch, s.out[0], s.out[1]}).permute({1, 0, 2, 3}) +
          bias.view({1, d.out_channels, 1, 1}))
      .contiguous();
}
// ANCHOR_END: deform_conv2d

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& offset, const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h,
    int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w,
    int64_t groups, int64_t offset_groups, bool use_mask) {
  const Deformable d = deformable("_deform_conv2d_backward", input, weight, offset, mask, bias,
                                  stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                  groups, offset_groups, use_mask);
  check_devices("_deform_conv2d_backward", {{"grad", &grad}, {"input", &input}});
  const DeformShape& s = d.shape;
  const int64_t positions = s.batch * s.out[0] * s.out[1];
  TORCH_CHECK(grad.dim() == 4 && grad.size(0) == s.batch && grad.size(1) == d.out_channels &&
                  grad.size(2) == s.out[0] && grad.size(3) == s.out[1],
              "_deform_conv2d_backward: expected a gradient of [", s.batch, ", ", d.out_channels,
              ", ", s.out[0], ", ", s.out[1], "], got ", grad.sizes());
  if (!ours(input) || grad.scalar_type() != input.scalar_type()) {
    return on_cpu<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>>(
        "torchvision::_deform_conv2d_backward", grad, input, weight, offset, mask, bias, stride_h,
        stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups, use_mask);
  }
  at::Tensor grad_mask = at::zeros(mask.sizes(), mask.options());
  if (positions == 0 || s.channels == 0) {
    return {at::zeros(input.sizes(), input.options()), at::zeros(weight.sizes(), weight.options()),
            at::zeros(offset.sizes(), offset.options()), grad_mask, grad.sum({0, 2, 3})};
  }
  const at::Tensor x = input.contiguous(), off = offset.contiguous();
  const at::Tensor m = use_mask ? mask.contiguous() : at::Tensor();
  // The gradient per group, [out/g, positions], its rows in output-channel order.
  const at::Tensor g = grad.permute({1, 0, 2, 3}).reshape({d.groups, d.out_channels / d.groups, positions});
  const at::Tensor w = weight.contiguous().view({d.groups, d.out_channels / d.groups, -1});
  // The columns' gradient (weight^T times the gradient), scattered onto the input's pixels
  // and onto the offsets and mask that placed each sample.
  const at::Tensor grad_columns = at::bmm(w.transpose(1, 2), g);
  at::Tensor grad_input = at::empty(input.sizes(), input.options());
  at::Tensor grad_offset = at::empty(offset.sizes(), offset.options());
  deform_pass(DeformPass::Col2im, s, {grad_input, grad_columns, off, m});
  deform_pass(DeformPass::Col2imCoord, s,
              {grad_offset, use_mask ? grad_mask : at::Tensor(), grad_columns, x, off, m});
  // The weight's gradient: the gradient times the sampled input, as a convolution's.
  at::Tensor columns = at::empty({s.channels * s.kernel[0] * s.kernel[1], positions}, input.options());
  deform_pass(DeformPass::Im2col, s, {columns, x, off, m});
  const at::Tensor grad_weight =
      at::bmm(g, columns.view({d.groups, -1, positions}).transpose(1, 2)).view(weight.sizes());
  return {grad_input, grad_weight, grad_offset, grad_mask, grad.sum({0, 2, 3})};
}

}  // namespace

// ANCHOR: register
void register_torchvision_ops() {
  // A fragment of torchvision's namespace for our dispatch key. torchvision need not be
  // imported (or installed): the kernels wait in the dispatcher for their schemas.
  static torch::Library library(torch::Library::IMPL, "torchvision", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("nms", TORCH_FN(nms));
    library.impl("roi_align", TORCH_FN(roi_align));
    library.impl("_roi_align_backward", TORCH_FN(roi_align_backward));
    library.impl("roi_pool", TORCH_FN(roi_pool));
    library.impl("_roi_pool_backward", TORCH_FN(roi_pool_backward));
    library.impl("ps_roi_align", TORCH_FN(ps_roi_align));
    library.impl("_ps_roi_align_backward", TORCH_FN(ps_roi_align_backward));
    library.impl("ps_roi_pool", TORCH_FN(ps_roi_pool));
    library.impl("_ps_roi_pool_backward", TORCH_FN(ps_roi_pool_backward));
    library.impl("deform_conv2d", TORCH_FN(deform_conv2d));
    library.impl("_deform_conv2d_backward", TORCH_FN(deform_conv2d_backward));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register

}  // namespace openreg
