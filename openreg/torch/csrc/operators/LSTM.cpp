// nn.LSTM a layer at a time. at::lstm is CompositeImplicitAutograd: for a device without a
// kernel of its own it unrolls the sequence into two matrix products and a fused cell per
// time step, each recorded by autograd (RNN.cpp has the cells). CUDA and CPU instead hand the
// whole sequence to cuDNN or oneDNN. A PrivateUse1 backend gets the same by registering
// lstm.input for AutogradPrivateUse1: its kernel then replaces the composite one, and a
// torch::autograd::Function gives each layer one node with our own backward. The Rust kernel
// is src/operators/kernels/lstm.rs.

#include "operators/Structured.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/stack.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace openreg {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void launch(bool backward, const at::Tensor& input, int64_t hidden, bool reverse,
            std::initializer_list<at::Tensor> operands) {
  c10::SmallVector<Dense, 16> slots;
  for (const at::Tensor& t : operands) {
    slots.push_back(dense(t));
  }
  const LstmShape shape{input.size(0), input.size(1), input.size(2), hidden, reverse};
  call([&] {
    launch_lstm_layer(backward, shape, {slots.data(), slots.size()}, input.device().index());
  });
}

// ANCHOR: layer
// One layer in one direction over a [time, batch, input] sequence; returns the output
// [time, batch, hidden] and the last step's h and c.
struct LstmLayer : public torch::autograd::Function<LstmLayer> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& w_ih, const at::Tensor& w_hh,
                               const std::optional<at::Tensor>& b_ih,
                               const std::optional<at::Tensor>& b_hh, const at::Tensor& hx,
                               const at::Tensor& cx, bool reverse) {
    const int64_t time = input.size(0), batch = input.size(1), hidden = w_hh.size(1);
    const auto options = input.options();
    at::Tensor output = at::empty({time, batch, hidden}, options);
    at::Tensor hy = at::empty({batch, hidden}, options), cy = at::empty({batch, hidden}, options);
    // Each step's activated gates and cell state: what backward needs, in our own layout.
    at::Tensor workspace = at::empty({time, batch, 5 * hidden}, options);
    const at::Tensor x = input.contiguous(), wi = w_ih.contiguous(), wh = w_hh.contiguous();
    const at::Tensor h = hx.contiguous(), c = cx.contiguous();
    launch(false, x, hidden, reverse,
           {output, hy, cy, workspace, x, wi, wh, b_ih ? b_ih->contiguous() : at::Tensor(),
            b_hh ? b_hh->contiguous() : at::Tensor(), h, c});
    ctx->save_for_backward({x, wi, wh, h, c, output});
    ctx->saved_data["workspace"] = workspace;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["bias"] = b_ih.has_value();
    return {output, hy, cy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wi = saved[1], &wh = saved[2];
    const int64_t hidden = wh.size(1);
    const auto options = x.options();
    // Skipped when the input needs no gradient (the first layer over data).
    at::Tensor grad_input = ctx->needs_input_grad(0) ? at::empty(x.sizes(), options) : at::Tensor();
    at::Tensor grad_w_ih = at::empty(wi.sizes(), options), grad_w_hh = at::empty(wh.sizes(), options);
    at::Tensor grad_bias = at::empty({4 * hidden}, options);
    at::Tensor grad_hx = at::empty(saved[3].sizes(), options);
    at::Tensor grad_cx = at::empty(saved[4].sizes(), options);
    auto given = [](const at::Tensor& g) { return g.defined() ? g.contiguous() : g; };
    launch(true, x, hidden, ctx->saved_data["reverse"].toBool(),
           {grad_input, grad_w_ih, grad_w_hh, grad_bias, grad_hx, grad_cx, given(grads[0]),
            given(grads[1]), given(grads[2]), x, wi, wh, saved[3], saved[4], saved[5],
            ctx->saved_data["workspace"].toTensor()});
    // Both biases are added to the same gates, so they share one gradient.
    const at::Tensor bias = ctx->saved_data["bias"].toBool() ? grad_bias : at::Tensor();
    return {grad_input, grad_w_ih, grad_w_hh, bias, bias, grad_hx, grad_cx, at::Tensor()};
  }
};
// ANCHOR_END: layer

// ANCHOR: lstm
// What the Rust layer computes: float32 on one openreg device, the weights of a plain LSTM (no
// projections) with the sizes the input and states imply, a non-empty sequence and batch.
bool takes(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
           int64_t num_layers, bool bidirectional) {
  const int64_t directions = bidirectional ? 2 : 1, per_layer = has_biases ? 4 : 2;
  if (input.dim() != 3 || input.scalar_type() != at::kFloat || hx.size() != 2 ||
      hx[0].dim() != 3 || num_layers < 1 ||
      static_cast<int64_t>(params.size()) != num_layers * directions * per_layer ||
      input.size(0) == 0 || input.size(1) == 0) {
    return false;
  }
  const int64_t batch = input.size(1), hidden = hx[0].size(2);
  const std::vector<int64_t> state{num_layers * directions, batch, hidden};
  if (hx[0].sizes() != state || hx[1].sizes() != hx[0].sizes() || hidden == 0) {
    return false;
  }
  for (const at::Tensor& t : {input, hx[0], hx[1]}) {
    if (t.device() != input.device() || t.scalar_type() != at::kFloat) {
      return false;
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const at::Tensor& p = params[k];
    const int64_t layer = static_cast<int64_t>(k) / (directions * per_layer);
    const int64_t in = layer == 0 ? input.size(2) : directions * hidden;
    const std::vector<int64_t> expected =
        k % per_layer == 0 ? std::vector<int64_t>{4 * hidden, in}
        : k % per_layer == 1 ? std::vector<int64_t>{4 * hidden, hidden}
                              : std::vector<int64_t>{4 * hidden};
    if (p.device() != input.device() || p.scalar_type() != at::kFloat || p.sizes() != expected) {
      return false;
    }
  }
  return true;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(
    const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
    int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  if (input.device().type() != kOpenReg ||
      !takes(batch_first ? input.transpose(0, 1) : input, hx, params, has_biases, num_layers,
             bidirectional)) {
    // Anything else runs PyTorch's composite (per step, with its checks and messages).
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  }
  const int64_t directions = bidirectional ? 2 : 1, per_layer = has_biases ? 4 : 2;
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hy, cy;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<at::Tensor> outputs;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t k = layer * directions + d;
      const at::Tensor* p = &params[k * per_layer];
      // A C++ autograd Function takes no undefined tensors: an absent bias is an empty optional.
      const auto bias = [&](int64_t i) {
        return has_biases ? std::optional<at::Tensor>(p[i]) : std::nullopt;
      };
      variable_list r =
          LstmLayer::apply(x, p[0], p[1], bias(2), bias(3), hx[0][k], hx[1][k], d == 1);
      outputs.push_back(r[0]);
      hy.push_back(r[1]);
      cy.push_back(r[2]);
    }
    x = directions == 2 ? at::cat(outputs, 2) : outputs[0];
    if (dropout != 0 && train && layer + 1 < num_layers) {
      x = at::dropout(x, dropout, train);
    }
  }
  return {batch_first ? x.transpose(0, 1) : x, at::stack(hy), at::stack(cy)};
}
// ANCHOR_END: lstm

} // namespace

void register_lstm() {
  static torch::Library autograd(torch::Library::IMPL, "aten",
                                 c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  // Under inference_mode the autograd key is skipped: the same kernel then records nothing.
  static torch::Library backend(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    autograd.impl("lstm.input", TORCH_FN(lstm));
    backend.impl("lstm.input", TORCH_FN(lstm));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
