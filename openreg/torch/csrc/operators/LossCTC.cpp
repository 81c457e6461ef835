// The CTC loss (nn.CTCLoss) with the Rust kernel in src/operators/kernels/ctc.rs: `_ctc_loss`
// and its backward, with the lengths given as lists or as tensors. `ctc_loss` itself is a
// composite (CompositeImplicitAutograd) that calls these and applies the reduction with device
// operators. The checks and their messages are CPU's (ctc_loss_allocate_outputs in
// aten/src/ATen/native/LossCTC.cpp, through ATen/TensorUtils.h).

#include "operators/Structured.h"

#include <ATen/TensorUtils.h>
#include <ATen/ops/_ctc_loss.h>
#include <ATen/ops/_ctc_loss_backward.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

namespace openreg {
namespace {

// The kernel's view of one call: CPU's argument checks, and the targets with one row per
// sequence of exactly the longest target's length (2-D) or concatenated (1-D).
struct Ctc {
  LossArgs args{};
  at::Tensor targets;
  std::vector<int64_t> lengths;  // input lengths, then target lengths

  Ctc(const at::Tensor& log_probs, const at::Tensor& targets_, at::IntArrayRef input_lengths,
      at::IntArrayRef target_lengths, int64_t blank, bool zero_infinity) {
    const at::CheckedFrom c = "ctc_loss_allocate_outputs";  // the name CPU's checks report
    const at::TensorArg log_probs_arg{log_probs, "log_probs", 1}, targets_arg{targets_, "targets", 2};
    at::checkScalarTypes(c, targets_arg, {at::kLong, at::kInt});
    at::checkDim(c, log_probs_arg, 3);
    at::checkDimRange(c, targets_arg, 1, 3);
    const int64_t batch = log_probs.size(1), classes = log_probs.size(2);
    TORCH_CHECK(0 <= blank && blank < classes, "blank must be in label range");
    TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == batch, "input_lengths must be of size batch_size");
    TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == batch, "target_lengths must be of size batch_size");
    const int64_t longest = target_lengths.empty() ? 0 : *std::max_element(target_lengths.begin(), target_lengths.end());
    if (targets_.dim() == 1) {
      int64_t total = 0;
      for (int64_t l : target_lengths) {
        total += l;
      }
      at::checkSize(c, targets_arg, 0, total);
      targets = targets_.contiguous();
    } else {
      at::checkSize(c, targets_arg, 0, batch);
      TORCH_CHECK(targets_.size(1) >= longest, "Expected tensor to have size at least ", longest,
                  " at dimension 1, but got size ", targets_.size(1), " for ", targets_arg,
                  " (while checking arguments for ", c, ")");
      targets = targets_.narrow(1, 0, longest).contiguous();
    }
    for (int64_t l : input_lengths) {
      TORCH_CHECK(l <= log_probs.size(0), "Expected input_lengths to have value at most ",
                  log_probs.size(0), ", but got value ", l, " (while checking arguments for ", c, ")");
    }
    args.batch = batch;
    args.classes = classes;
    args.time = log_probs.size(0);
    args.max_target = longest;
    args.blank = blank;
    args.targets_2d = targets_.dim() == 2;
    args.zero_infinity = zero_infinity;
    lengths.assign(input_lengths.begin(), input_lengths.end());
    lengths.insert(lengths.end(), target_lengths.begin(), target_lengths.end());
  }

  bool run(Loss op, std::initializer_list<at::Tensor> operands) const {
    std::vector<Dense> slots;
    for (const at::Tensor& t : operands) {
      slots.push_back(dense(t));
    }
    return call([&] {
      return launch_loss(op, args, {slots.data(), slots.size()}, {lengths.data(), lengths.size()},
                         operands.begin()->device().index());
    });
  }
};

// ANCHOR: ctc_loss
std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                            at::IntArrayRef input_lengths,
                                            at::IntArrayRef target_lengths, int64_t blank,
                                            bool zero_infinity) {
  check_devices("_ctc_loss", {{"log_probs", &log_probs}, {"targets", &targets}});
  const Ctc ctc(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity);
  const at::TensorOptions options = log_probs.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor nll = at::empty({ctc.args.batch}, options);
  at::Tensor log_alpha = at::empty({ctc.args.batch, ctc.args.time, 2 * ctc.args.max_target + 1}, options);
  if (!ctc.run(Loss::Ctc, {nll, log_alpha, log_probs.contiguous(), ctc.targets})) {
    on_host("_ctc_loss", log_probs.scalar_type(), [&] {
      auto [n, a] = at::_ctc_loss(host_alias(log_probs), host_alias(targets), input_lengths,
                                  target_lengths, blank, zero_infinity);
      nll.copy_(n);
      log_alpha.copy_(a);
    });
  }
  return {nll, log_alpha};
}
// ANCHOR_END: ctc_loss

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs,
                             const at::Tensor& targets, at::IntArrayRef input_lengths,
                             at::IntArrayRef target_lengths, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  check_devices("_ctc_loss_backward", {{"grad", &grad}, {"log_probs", &log_probs}, {"targets", &targets},
                                       {"neg_log_likelihood", &nll}, {"log_alpha", &log_alpha}});
  const Ctc ctc(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity);
  at::Tensor result = at::empty(log_probs.sizes(), log_probs.options().memory_format(at::MemoryFormat::Contiguous));
  if (!ctc.run(Loss::CtcBackward, {result, grad.contiguous(), log_probs.contiguous(), ctc.targets,
                                   nll.contiguous(), log_alpha.contiguous()})) {
    on_host("_ctc_loss_backward", log_probs.scalar_type(), [&] {
      result.copy_(at::_ctc_loss_backward(host_alias(grad), host_alias(log_probs), host_alias(targets),
                                          input_lengths, target_lengths, host_alias(nll),
                                          host_alias(log_alpha), blank, zero_infinity));
    });
  }
  return result;
}

// The lengths as tensors (on any device): read on the host, as CPU's overload does.
std::vector<int64_t> host_lengths(const at::Tensor& lengths, const char* name) {
  TORCH_CHECK(at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), name, " must be integral");
  const at::Tensor host = lengths.to(at::kCPU, at::kLong).contiguous();
  return {host.const_data_ptr<int64_t>(), host.const_data_ptr<int64_t>() + host.numel()};
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& log_probs, const at::Tensor& targets,
                                                   const at::Tensor& input_lengths,
                                                   const at::Tensor& target_lengths, int64_t blank,
                                                   bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                  host_lengths(target_lengths, "target_lengths"), blank, zero_infinity);
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs,
                                    const at::Tensor& targets, const at::Tensor& input_lengths,
                                    const at::Tensor& target_lengths, const at::Tensor& nll,
                                    const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  return ctc_loss_backward(grad, log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                           host_lengths(target_lengths, "target_lengths"), nll, log_alpha, blank,
                           zero_infinity);
}

} // namespace

void register_ctc_loss() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_ctc_loss", TORCH_FN(ctc_loss));
    library.impl("_ctc_loss.Tensor", TORCH_FN(ctc_loss_tensor));
    library.impl("_ctc_loss_backward", TORCH_FN(ctc_loss_backward));
    library.impl("_ctc_loss_backward.Tensor", TORCH_FN(ctc_loss_backward_tensor));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
