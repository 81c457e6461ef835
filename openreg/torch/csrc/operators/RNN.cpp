// The fused recurrent cells. at::lstm and at::gru (behind nn.LSTM, nn.GRU, nn.LSTMCell and
// nn.GRUCell) multiply the gates with `linear`, then, for a CUDA, XPU or PrivateUse1 tensor,
// call _thnn_fused_lstm_cell / _thnn_fused_gru_cell for the rest of the step. These operators
// have no CPU kernel (the CPU path composes smaller ops instead), so the fallback cannot run
// them: a device must. The Rust kernel is src/operators/kernels/rnn.rs.

#include "operators/Structured.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

namespace openreg {
namespace {

using Tensors = std::initializer_list<at::Tensor>;

// ANCHOR: check_cell
// The operands' shapes, as CUDA's kernels check them: gates [batch, gates * hidden], the state
// [batch, hidden], biases [gates * hidden], one dtype.
int64_t check_cell(const char* op, int64_t gates, const at::Tensor& input_gates,
                   const at::Tensor& hidden_gates, const at::Tensor& state, const char* state_name,
                   const at::Tensor& input_bias, const at::Tensor& hidden_bias) {
  check_devices(op, {{"input_gates", &input_gates}, {"hidden_gates", &hidden_gates},
                     {state_name, &state}, {"input_bias", &input_bias},
                     {"hidden_bias", &hidden_bias}});
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.size(1) % gates == 0, op,
              ": expected input_gates of size [batch, ", gates, " * hidden], got ",
              input_gates.sizes());
  const int64_t batch = input_gates.size(0), hidden = input_gates.size(1) / gates;
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op,
              ": expected hidden_gates of the size of input_gates, ", input_gates.sizes(),
              ", got ", hidden_gates.sizes());
  TORCH_CHECK(state.sizes() == at::IntArrayRef({batch, hidden}), op, ": expected ", state_name,
              " of size [", batch, ", ", hidden, "], got ", state.sizes());
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": expected both biases or neither");
  for (const at::Tensor& t : {hidden_gates, state, input_bias, hidden_bias}) {
    if (t.defined()) {
      TORCH_CHECK(t.scalar_type() == input_gates.scalar_type(), op,
                  ": expected every operand in ", input_gates.scalar_type(), ", got one in ",
                  t.scalar_type());
    }
  }
  for (const at::Tensor& bias : {input_bias, hidden_bias}) {
    TORCH_CHECK(!bias.defined() || bias.sizes() == at::IntArrayRef({gates * hidden}), op,
                ": expected biases of size [", gates * hidden, "], got ", bias.sizes());
  }
  return hidden;
}
// ANCHOR_END: check_cell

// Runs the cell kernel over contiguous copies of `operands` (outputs first, contiguous already).
void run(const char* op, Cell cell, Tensors operands, int64_t batch, int64_t hidden) {
  c10::SmallVector<at::Tensor, 8> contiguous;  // keeps the copies alive
  c10::SmallVector<Dense, 8> slots;
  for (const at::Tensor& t : operands) {
    contiguous.push_back(t.defined() ? t.contiguous() : t);
    slots.push_back(dense(contiguous.back()));
  }
  const at::Tensor& first = *operands.begin();
  const bool done = call([&] {
    return launch_rnn_cell(cell, {slots.data(), slots.size()}, batch, hidden,
                           first.device().index());
  });
  TORCH_CHECK_NOT_IMPLEMENTED(done, op, " on openreg computes in float32, float16 and bfloat16, "
                              "not ", first.scalar_type());
}

at::Tensor bias_gradient(bool has_bias, const at::Tensor& grad_gates) {
  return has_bias ? at::sum(grad_gates, {0}) : at::Tensor();
}

// ANCHOR: lstm_cell
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  const at::Tensor ib = input_bias.value_or(at::Tensor()), hb = hidden_bias.value_or(at::Tensor());
  const int64_t hidden =
      check_cell("_thnn_fused_lstm_cell", 4, input_gates, hidden_gates, cx, "cx", ib, hb);
  const int64_t batch = cx.size(0);
  const auto options = input_gates.options();
  at::Tensor hy = at::empty({batch, hidden}, options), cy = at::empty({batch, hidden}, options);
  at::Tensor workspace = at::empty({batch, 4 * hidden}, options);
  run("_thnn_fused_lstm_cell", Cell::LstmForward,
      {hy, cy, workspace, input_gates, hidden_gates, cx, ib, hb}, batch, hidden);
  return {hy, cy, workspace};
}
// ANCHOR_END: lstm_cell

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const at::Tensor gh = grad_hy.value_or(at::Tensor()), gc = grad_cy.value_or(at::Tensor());
  if (!gh.defined() && !gc.defined()) {
    return {};  // no gradient reached the cell
  }
  const char* op = "_thnn_fused_lstm_cell_backward";
  check_devices(op, {{"grad_hy", &gh}, {"grad_cy", &gc}, {"cx", &cx}, {"cy", &cy},
                     {"workspace", &workspace}});
  const int64_t batch = cx.dim() == 2 ? cx.size(0) : -1, hidden = cx.dim() == 2 ? cx.size(1) : -1;
  TORCH_CHECK(batch >= 0 && cy.sizes() == cx.sizes() &&
                  workspace.sizes() == at::IntArrayRef({batch, 4 * hidden}) &&
                  (!gh.defined() || gh.sizes() == cx.sizes()) &&
                  (!gc.defined() || gc.sizes() == cx.sizes()),
              op, ": operands of mismatched sizes: cx ", cx.sizes(), ", cy ", cy.sizes(),
              ", workspace ", workspace.sizes());
  at::Tensor grad_gates = at::empty(workspace.sizes(), workspace.options());
  at::Tensor grad_cx = at::empty(cx.sizes(), cx.options());
  run(op, Cell::LstmBackward, {grad_gates, grad_cx, gh, gc, cx, cy, workspace}, batch, hidden);
  return {grad_gates, grad_cx, bias_gradient(has_bias, grad_gates)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates,
                                            const at::Tensor& hidden_gates, const at::Tensor& hx,
                                            const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  const at::Tensor ib = input_bias.value_or(at::Tensor()), hb = hidden_bias.value_or(at::Tensor());
  const int64_t hidden =
      check_cell("_thnn_fused_gru_cell", 3, input_gates, hidden_gates, hx, "hx", ib, hb);
  const int64_t batch = hx.size(0);
  at::Tensor hy = at::empty({batch, hidden}, input_gates.options());
  at::Tensor workspace = at::empty({batch, 5 * hidden}, input_gates.options());
  run("_thnn_fused_gru_cell", Cell::GruForward, {hy, workspace, input_gates, hidden_gates, hx, ib, hb},
      batch, hidden);
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  check_devices(op, {{"grad_hy", &grad_hy}, {"workspace", &workspace}});
  const int64_t batch = grad_hy.dim() == 2 ? grad_hy.size(0) : -1;
  const int64_t hidden = grad_hy.dim() == 2 ? grad_hy.size(1) : -1;
  TORCH_CHECK(batch >= 0 && workspace.sizes() == at::IntArrayRef({batch, 5 * hidden}), op,
              ": expected grad_hy [batch, hidden] and workspace [batch, 5 * hidden], got ",
              grad_hy.sizes(), " and ", workspace.sizes());
  const auto options = workspace.options();
  at::Tensor grad_input_gates = at::empty({batch, 3 * hidden}, options);
  at::Tensor grad_hidden_gates = at::empty({batch, 3 * hidden}, options);
  at::Tensor grad_hx = at::empty({batch, hidden}, options);
  run(op, Cell::GruBackward, {grad_input_gates, grad_hidden_gates, grad_hx, grad_hy, workspace},
      batch, hidden);
  return {grad_input_gates, grad_hidden_gates, grad_hx, bias_gradient(has_bias, grad_input_gates),
          bias_gradient(has_bias, grad_hidden_gates)};
}

} // namespace

void register_rnn_cells() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
    library.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
    library.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
    library.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
