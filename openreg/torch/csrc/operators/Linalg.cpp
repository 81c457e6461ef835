// torch.linalg.qr with a Rust kernel (kernels/linalg.rs): the structured meta function gives
// Q's and R's shapes and (column-major, LAPACK's) strides and CPU's errors; the kernel writes
// row-major matrices, copied into the outputs.

#include "operators/Structured.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/linalg_qr_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

template <Variant kind>
std::tuple<at::Tensor, at::Tensor> qr(const at::Tensor& A, c10::string_view mode, const at::Tensor& Q = {},
                                      const at::Tensor& R = {}) {
  Structured<at::meta::structured_linalg_qr, kind> s(Q, R);
  s.meta(A, mode);
  const at::Tensor& q = s.maybe_get_output(0);
  const at::Tensor& r = s.maybe_get_output(1);
  const bool complete = mode == "complete", q_wanted = mode != "r";
  const int64_t m = A.size(-2), n = A.size(-1);
  const int64_t batch = A.numel() / std::max<int64_t>(m * n, 1);
  const at::Tensor a = A.contiguous();
  at::Tensor qc = q_wanted ? at::empty(q.sizes(), q.options()) : at::Tensor();
  at::Tensor rc = at::empty(r.sizes(), r.options());
  const bool done = call([&] {
    return launch_qr(dense(a), q_wanted ? dense(qc) : Dense{0, 0, 0, 0, dense(a).dtype}, dense(rc), batch, m, n,
                     complete, A.device().index());
  });
  if (!done) {
    on_host("linalg_qr", A.scalar_type(), [&] {
      at::Tensor qh = q_wanted ? host_alias(q) : at::Tensor(), rh = host_alias(r);
      auto [qcpu, rcpu] = at::linalg_qr(host_alias(A), mode);
      if (q_wanted) {
        qh.copy_(qcpu);
      }
      rh.copy_(rcpu);
    });
  } else {
    if (q_wanted) {
      q.copy_(qc);
    }
    r.copy_(rc);
  }
  return {s.result(0), s.result(1)};
}

std::tuple<at::Tensor, at::Tensor> linalg_qr(const at::Tensor& A, c10::string_view mode) {
  return qr<Variant::Functional>(A, mode);
}

std::tuple<at::Tensor&, at::Tensor&> linalg_qr_out(const at::Tensor& A, c10::string_view mode, at::Tensor& Q,
                                                   at::Tensor& R) {
  qr<Variant::Out>(A, mode, Q, R);
  return {Q, R};
}

} // namespace

void register_linalg() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("linalg_qr", TORCH_FN(linalg_qr));
    library.impl("linalg_qr.out", TORCH_FN(linalg_qr_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
