// Softmax and log-softmax, forward and backward, with the Rust kernel in
// src/operators/kernels/softmax.rs. The structured metas give the result (contiguous, and float32 for
// `half_to_float`); the kernel sees every operand as a contiguous [outer, size, inner] block.

#include "operators/Structured.h"

#include <ATen/ops/_log_softmax.h>
#include <ATen/ops/_log_softmax_backward_data.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/empty.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <limits>

namespace openreg {
namespace {

// ANCHOR: run_softmax
// Runs `op` along `dim` into `out` (computed in a contiguous temporary if `out` is not
// contiguous). False, having done nothing, if the kernel does not handle the dtypes.
bool run_softmax(Softmax op, const at::Tensor& out, std::initializer_list<at::Tensor> inputs,
                 int64_t dim) {
  int64_t outer = 1, size = 1, inner = 1;
  if (out.dim() > 0) {
    dim = c10::maybe_wrap_dim(dim, out.dim());
    size = out.size(dim);
    for (int64_t d = 0; d < out.dim(); ++d) {
      if (d < dim) {
        outer *= out.size(d);
      } else if (d > dim) {
        inner *= out.size(d);
      }
    }
  }
  const at::Tensor result = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  c10::SmallVector<at::Tensor, 2> contiguous;  // keeps the contiguous copies alive
  c10::SmallVector<Dense, 2> operands;
  for (const at::Tensor& t : inputs) {
    contiguous.push_back(t.contiguous());
    operands.push_back(dense(contiguous.back()));
  }
  const bool done = call([&] {
    return launch_softmax(op, dense(result), {operands.data(), operands.size()},
                          dense(at::Tensor()), outer, size, inner, out.device().index());
  });
  if (done && !result.is_same(out)) {
    out.copy_(result);
  }
  return done;
}
// ANCHOR_END: run_softmax

// ANCHOR: log_softmax
template <class Meta, Variant kind, class Host>
at::Tensor forward(Softmax op, const char* name, const at::Tensor& self, int64_t dim,
                   bool half_to_float, const at::Tensor& given, Host&& host) {
  Structured<Meta, kind> s(given);
  s.meta(self, dim, half_to_float);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_softmax(op, out, {self}, dim)) {
    on_host(name, self.scalar_type(), [&] {
      host(host_alias(out), host_alias(self));
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float,
                       const at::Tensor& given = {}) {
  return forward<at::meta::structured__log_softmax, kind>(
      Softmax::LogSoftmax, "_log_softmax", self, dim, half_to_float, given,
      [&](at::Tensor out, const at::Tensor& host_self) {
        at::_log_softmax_out(out, host_self, dim, half_to_float);
      });
}
// ANCHOR_END: log_softmax

template <Variant kind>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float,
                   const at::Tensor& given = {}) {
  return forward<at::meta::structured__softmax, kind>(
      Softmax::Softmax, "_softmax", self, dim, half_to_float, given,
      [&](at::Tensor out, const at::Tensor& host_self) {
        at::_softmax_out(out, host_self, dim, half_to_float);
      });
}

template <class Meta, Variant kind, class Host>
at::Tensor backward(Softmax op, const char* name, const char* method, const at::Tensor& grad_output,
                    const at::Tensor& output, int64_t dim, at::ScalarType input_dtype,
                    const at::Tensor& given, Host&& host) {
  check_devices(method, {{"grad_output", &grad_output}, {"output", &output}, {"out", &given}});
  Structured<Meta, kind> s(given);
  s.meta(grad_output, output, dim, input_dtype);
  const at::Tensor& grad_input = s.maybe_get_output(0);
  if (!run_softmax(op, grad_input, {grad_output, output}, dim)) {
    on_host(name, grad_output.scalar_type(), [&] {
      host(host_alias(grad_input), host_alias(grad_output), host_alias(output));
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype,
                                const at::Tensor& given = {}) {
  return backward<at::meta::structured__log_softmax_backward_data, kind>(
      Softmax::LogSoftmaxBackward, "_log_softmax_backward_data",
      "wrapper_PrivateUse1__log_softmax_backward_data", grad_output,
      output, dim, input_dtype, given,
      [&](at::Tensor out, const at::Tensor& g, const at::Tensor& y) {
        at::_log_softmax_backward_data_out(out, g, y, dim, input_dtype);
      });
}

template <Variant kind>
at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype, const at::Tensor& given = {}) {
  return backward<at::meta::structured__softmax_backward_data, kind>(
      Softmax::SoftmaxBackward, "_softmax_backward_data",
      "wrapper_PrivateUse1__softmax_backward_data", grad_output,
      output, dim, input_dtype, given,
      [&](at::Tensor out, const at::Tensor& g, const at::Tensor& y) {
        at::_softmax_backward_data_out(out, g, y, dim, input_dtype);
      });
}

at::Tensor log_softmax_functional(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return log_softmax<Variant::Functional>(self, dim, half_to_float);
}

at::Tensor softmax_functional(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmax<Variant::Functional>(self, dim, half_to_float);
}

at::Tensor log_softmax_backward_functional(const at::Tensor& grad_output,
                                           const at::Tensor& output, int64_t dim,
                                           at::ScalarType input_dtype) {
  return log_softmax_backward<Variant::Functional>(grad_output, output, dim, input_dtype);
}

at::Tensor softmax_backward_functional(const at::Tensor& grad_output, const at::Tensor& output,
                                       int64_t dim, at::ScalarType input_dtype) {
  return softmax_backward<Variant::Functional>(grad_output, output, dim, input_dtype);
}

at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                            at::Tensor& out) {
  log_softmax<Variant::Out>(self, dim, half_to_float, out);
  return out;
}

at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                        at::Tensor& out) {
  softmax<Variant::Out>(self, dim, half_to_float, out);
  return out;
}

at::Tensor& log_softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                     int64_t dim, at::ScalarType input_dtype, at::Tensor& out) {
  log_softmax_backward<Variant::Out>(grad_output, output, dim, input_dtype, out);
  return out;
}

at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, at::ScalarType input_dtype, at::Tensor& out) {
  softmax_backward<Variant::Out>(grad_output, output, dim, input_dtype, out);
  return out;
}

} // namespace

// ANCHOR: softmax_lse
at::Tensor softmax_with_lse(const at::Tensor& scores, const at::Tensor& lse) {
  TORCH_CHECK(scores.scalar_type() == at::kFloat && scores.is_contiguous() && scores.dim() > 0 &&
                  lse.scalar_type() == at::kFloat && lse.is_contiguous() &&
                  lse.numel() * scores.size(-1) == scores.numel(),
              "softmax_with_lse: expected contiguous float32 scores and one lse per row, got ",
              scores.sizes(), " and ", lse.sizes());
  at::Tensor p = at::empty(scores.sizes(), scores.options());
  if (scores.size(-1) == 0) {
    lse.fill_(-std::numeric_limits<double>::infinity());  // the log of an empty sum
    return p;
  }
  const Dense input = dense(scores);
  call([&] {
    return launch_softmax(Softmax::Softmax, dense(p), {&input, 1}, dense(lse),
                          lse.numel(), scores.size(-1), 1, scores.device().index());
  });
  return p;
}
// ANCHOR_END: softmax_lse

void register_softmax() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_softmax", TORCH_FN(softmax_functional));
    library.impl("_softmax.out", TORCH_FN(softmax_out));
    library.impl("_log_softmax", TORCH_FN(log_softmax_functional));
    library.impl("_log_softmax.out", TORCH_FN(log_softmax_out));
    library.impl("_softmax_backward_data", TORCH_FN(softmax_backward_functional));
    library.impl("_softmax_backward_data.out", TORCH_FN(softmax_backward_out));
    library.impl("_log_softmax_backward_data", TORCH_FN(log_softmax_backward_functional));
    library.impl("_log_softmax_backward_data.out", TORCH_FN(log_softmax_backward_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
