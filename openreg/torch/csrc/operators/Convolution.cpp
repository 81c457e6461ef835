// Convolution through the hooks PyTorch keeps for out-of-tree devices. at::convolution checks
// the arguments (channels, groups, kernel against the padded input, stride, padding), pads
// `padding='same'` when it is uneven, picks a backend by device, and for PrivateUse1 calls
// convolution_overrideable; autograd's convolution_backward calls
// convolution_backward_overrideable. Neither has a CPU kernel, so the CPU fallback cannot serve
// them: a device must implement both. The Rust kernel (src/operators/kernels/conv.rs) computes
// in float32 on contiguous operands.

#include "operators/Structured.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: shape
// The geometry the kernel sees, in the terms of a convolution that is not transposed: `input`
// is the side im2col reads, `output` the side the product writes. 1-D and 2-D convolutions
// get leading spatial dimensions of size 1.
ConvShape conv_shape(const at::Tensor& input, const at::Tensor& output, const at::Tensor& weight,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t groups) {
  const int64_t spatial = input.dim() - 2;
  ConvShape s{};
  s.batch = input.size(0);
  s.groups = groups;
  s.in_channels = input.size(1);
  s.out_channels = output.size(1);
  for (int64_t d = 0; d < 3; ++d) {
    const int64_t k = d - (3 - spatial);  // the argument's index; < 0: a size-1 dimension
    auto arg = [&](at::IntArrayRef v, int64_t none) {
      return k < 0 ? none : v[v.size() == 1 ? 0 : k];
    };
    s.input[d] = k < 0 ? 1 : input.size(2 + k);
    s.output[d] = k < 0 ? 1 : output.size(2 + k);
    s.kernel[d] = k < 0 ? 1 : weight.size(2 + k);
    s.stride[d] = arg(stride, 1);
    s.padding[d] = arg(padding, 0);
    s.dilation[d] = arg(dilation, 1);
  }
  return s;
}
// ANCHOR_END: shape

void run(Conv op, const ConvShape& shape, const at::Tensor& input, const at::Tensor& output,
         const at::Tensor& weight, const at::Tensor& bias = {}) {
  call([&] {
    launch_convolution(op, shape, dense(input), dense(output), dense(weight), dense(bias),
                       input.device().index());
  });
}

bool computed(c10::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// The float32 contiguous tensor the kernel reads (the tensor itself when it already is one).
at::Tensor compute(const at::Tensor& t) {
  return t.defined() ? t.to(at::kFloat).contiguous() : t;
}

void check_arguments(const char* op, const at::Tensor& input, const at::Tensor& weight,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t groups) {
  TORCH_CHECK(input.dim() >= 3 && input.dim() <= 5 && weight.dim() == input.dim(), op,
              ": expected a batched 3-D, 4-D or 5-D input and a weight of as many dimensions, got "
              "input of size ", input.sizes(), " and weight of size ", weight.sizes());
  const size_t spatial = input.dim() - 2;
  using Arg = std::tuple<const char*, at::IntArrayRef, int64_t>;
  for (auto [name, v, least] : std::initializer_list<Arg>{
           {"stride", stride, 1}, {"padding", padding, 0}, {"dilation", dilation, 1}}) {
    TORCH_CHECK(v.size() == spatial || v.size() == 1, op, ": expected ", name, " to have ",
                spatial, " values, got ", v);
    for (int64_t x : v) {
      // at::convolution has checked these; the message is CPU's for dilation.
      TORCH_CHECK(x >= least, name, " should be ", least == 1 ? "greater than zero" : "non-negative",
                  ", but got ", v);
    }
  }
  TORCH_CHECK(groups > 0, op, ": expected groups > 0, got ", groups);
}

// CPU's transposed kernels check this one themselves (at::convolution does not).
void check_output_padding(at::IntArrayRef output_padding, at::IntArrayRef stride,
                          at::IntArrayRef dilation) {
  for (size_t k = 0; k < output_padding.size(); ++k) {
    auto pick = [&](at::IntArrayRef v) { return v[v.size() == 1 ? 0 : k]; };
    TORCH_CHECK(output_padding[k] < pick(stride) || output_padding[k] < pick(dilation),
                "output padding must be smaller than either stride or dilation, but got "
                "output_padding ", output_padding, ", stride ", stride, " and dilation ", dilation);
  }
}

// ANCHOR: convolution
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias_opt, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  check_devices("convolution_overrideable",
                {{"input", &input}, {"weight", &weight}, {"bias", &bias}});
  check_arguments("convolution_overrideable", input, weight, stride, padding, dilation, groups);
  if (transposed) {
    check_output_padding(output_padding, stride, dilation);
  }
  // Output sizes, as at::convolution computed them when it checked the arguments.
  std::vector<int64_t> sizes{input.size(0), transposed ? weight.size(1) * groups : weight.size(0)};
  for (int64_t k = 0; k < input.dim() - 2; ++k) {
    auto pick = [&](at::IntArrayRef v) { return v[v.size() == 1 ? 0 : k]; };
    const int64_t reach = pick(dilation) * (weight.size(2 + k) - 1) + 1;
    const int64_t extra = output_padding.empty() ? 0 : pick(output_padding);
    const int64_t padded = input.size(2 + k) + 2 * pick(padding);
    TORCH_CHECK(transposed || padded >= reach, "convolution_overrideable: kernel reach ", reach,
                " is larger than the padded input size ", padded);
    sizes.push_back(transposed
                        ? (input.size(2 + k) - 1) * pick(stride) - 2 * pick(padding) + reach + extra
                        : (padded - reach) / pick(stride) + 1);
    TORCH_CHECK(sizes.back() >= 0, "convolution_overrideable: input of size ", input.sizes(),
                " gives an output of negative size ", sizes.back());
  }
  at::Tensor output = at::empty(sizes, input.options());
  if (!computed(input.scalar_type())) {
    // float64 and others: CPU's convolution over the runtime's view of the operands.
    return on_host("convolution_overrideable", input.scalar_type(), [&] {
      host_alias(output).copy_(at::convolution(host_alias(input), host_alias(weight),
                                               bias.defined() ? host_alias(bias) : bias, stride,
                                               padding, dilation, transposed, output_padding, groups));
      return output;
    });
  }
  const at::Tensor x = compute(input), w = compute(weight), b = compute(bias);
  at::Tensor y = output.scalar_type() == at::kFloat ? output : at::empty(sizes, x.options());
  if (!transposed) {
    run(Conv::Forward, conv_shape(x, y, w, stride, padding, dilation, groups), x, y, w, b);
  } else {
    // A transposed convolution is the input gradient of the convolution it transposes.
    run(Conv::BackwardInput, conv_shape(y, x, w, stride, padding, dilation, groups), y, x, w);
    if (b.defined()) {
      std::vector<int64_t> channels(y.dim(), 1);
      channels[1] = b.numel();
      y.add_(b.view(channels));
    }
  }
  if (!y.is_same(output)) {
    output.copy_(y);
  }
  return output;
}
// ANCHOR_END: convolution

// ANCHOR: convolution_backward
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask) {
  check_devices("convolution_backward_overrideable",
                {{"grad_output", &grad_output}, {"input", &input}, {"weight", &weight}});
  check_arguments("convolution_backward_overrideable", input, weight, stride, padding, dilation,
                  groups);
  if (!computed(input.scalar_type())) {
    return on_host("convolution_backward_overrideable", input.scalar_type(), [&] {
      std::vector<int64_t> bias_sizes{grad_output.size(1)};
      auto [gi, gw, gb] = at::convolution_backward(
          host_alias(grad_output), host_alias(input), host_alias(weight), bias_sizes, stride,
          padding, dilation, transposed, output_padding, groups, mask);
      auto to_device = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
      return std::tuple<at::Tensor, at::Tensor, at::Tensor>{to_device(gi), to_device(gw), to_device(gb)};
    });
  }
  const at::Tensor g = compute(grad_output), x = compute(input), w = compute(weight);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) {
    grad_input = at::empty(x.sizes(), x.options());
    if (!transposed) {
      run(Conv::BackwardInput, conv_shape(grad_input, g, w, stride, padding, dilation, groups),
          grad_input, g, w);
    } else {
      run(Conv::Forward, conv_shape(g, grad_input, w, stride, padding, dilation, groups), g,
          grad_input, w);
    }
    grad_input = grad_input.to(input.scalar_type());
  }
  if (mask[1]) {
    grad_weight = at::empty(w.sizes(), w.options());
    // Σ over samples of (output side) @ (input side, unrolled)ᵀ.
    const at::Tensor& image = transposed ? g : x;
    const at::Tensor& columns = transposed ? x : g;
    run(Conv::BackwardWeight, conv_shape(image, columns, w, stride, padding, dilation, groups),
        image, columns, grad_weight);
    grad_weight = grad_weight.to(weight.scalar_type());
  }
  if (mask[2]) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_output.dim(); ++d) {
      dims.push_back(d);
    }
    grad_bias = at::sum(grad_output, dims);
  }
  return {grad_input, grad_weight, grad_bias};
}
// ANCHOR_END: convolution_backward

} // namespace

void register_convolution() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("convolution_overrideable", TORCH_FN(convolution));
    library.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
