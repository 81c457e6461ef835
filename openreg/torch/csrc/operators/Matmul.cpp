// Matrix products with the `gemm` crate (src/operators/kernels/matmul.rs): mm, addmm, bmm and
// baddbmm, their shapes and errors from PyTorch's structured meta functions; dot as a 1 x n by
// n x 1 product; _grouped_mm (kernels/grouped_matmul.rs), with its offsets read on the stream.

#include "operators/Structured.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/native/GroupedMMUtils.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mm_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: matrix
// A 2-D tensor, or a 3-D batch of them, as the Rust kernel sees it (strides in elements).
Matrix matrix(const at::Tensor& t) {
  const int64_t d = t.dim();
  return Matrix{addr(t.data_ptr()), addr(t.storage().data()), t.storage().nbytes(),
                d == 3 ? t.stride(0) : 0, t.stride(d - 2), t.stride(d - 1)};
}

// out = beta * out + alpha * (a @ b) in Rust; false when the kernel does not apply.
bool run_matmul(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double alpha,
                double beta) {
  const auto dtype = out.scalar_type();
  const bool supported = dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
  if (!supported || a.scalar_type() != dtype || b.scalar_type() != dtype || a.is_conj() ||
      b.is_conj() || a.is_neg() || b.is_neg()) {
    return false;
  }
  const int64_t batch = out.dim() == 3 ? out.size(0) : 1;
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  if (out.numel() == 0) {
    return true;
  }
  if (k == 0) {
    // An empty sum: alpha * 0, plus beta * out.
    beta == 0 ? out.zero_() : out.mul_(beta);
    return true;
  }
  // An operand with a unit stride in neither of its last two dimensions is copied first, as
  // BLAS libraries need (cuBLAS's callers in ATen do the same): the product of a strided
  // operand is then the product of a contiguous one, bit for bit.
  const auto blas_layout = [](const at::Tensor& t) {
    const int64_t d = t.dim();
    const bool rows = t.stride(d - 1) == 1 || t.size(d - 1) == 1, cols = t.stride(d - 2) == 1 || t.size(d - 2) == 1;
    return rows || cols ? t : t.contiguous();
  };
  const at::Tensor a_ = blas_layout(a), b_ = blas_layout(b);
  call([&] {
    launch_matmul(static_cast<int8_t>(dtype), batch, m, n, k, matrix(out), matrix(a_), matrix(b_),
                  alpha, beta, out.device().index());
  });
  return true;
}
// ANCHOR_END: matrix

template <Variant kind>
at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& given = {}) {
  check_devices("wrapper_PrivateUse1_mm", {{"self", &self}, {"mat2", &mat2}});
  Structured<at::meta::structured_mm, kind> s(given);
  s.meta(self, mat2);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_matmul(out, self, mat2, 1.0, 0.0)) {
    on_host("mm", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::mm_out(host, host_alias(self), host_alias(mat2));
    });
  }
  return s.result();
}

template <Variant kind>
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& given = {}) {
  check_devices("wrapper_PrivateUse1_bmm", {{"self", &self}, {"mat2", &mat2}});
  Structured<at::meta::structured_bmm, kind> s(given);
  s.meta(self, mat2);
  const at::Tensor& out = s.maybe_get_output(0);
  if (!run_matmul(out, self, mat2, 1.0, 0.0)) {
    on_host("bmm", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::bmm_out(host, host_alias(self), host_alias(mat2));
    });
  }
  return s.result();
}

// ANCHOR: addmm
template <Variant kind>
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha, const at::Tensor& given = {}) {
  check_devices("wrapper_PrivateUse1_addmm", {{"self", &self}, {"mat1", &mat1}, {"mat2", &mat2}});
  Structured<at::meta::structured_addmm, kind> s(given);
  s.meta(self, mat1, mat2, beta, alpha);
  const at::Tensor& out = s.maybe_get_output(0);
  const bool real = !beta.isComplex() && !alpha.isComplex();
  const double b = real ? beta.toDouble() : 0.0;
  // With beta == 0, `self` is ignored (its NaNs too); otherwise start from it, broadcast.
  // (The meta has checked that self, mat1 and mat2 share a dtype.)
  if (real && b != 0.0 && !out.is_same(self)) {
    out.copy_(self.expand(out.sizes()));
  }
  const bool done = real && run_matmul(out, mat1, mat2, alpha.toDouble(), b);
  if (!done) {
    on_host("addmm", out.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::addmm_out(host, host_alias(self), host_alias(mat1), host_alias(mat2), beta, alpha);
    });
  }
  return s.result();
}
// ANCHOR_END: addmm

// baddbmm is addmm over a batch: the same steps, the batched meta function.
template <Variant kind>
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha, const at::Tensor& given = {}) {
  check_devices("wrapper_PrivateUse1_baddbmm", {{"self", &self}, {"batch1", &batch1}, {"batch2", &batch2}});
  Structured<at::meta::structured_baddbmm, kind> s(given);
  s.meta(self, batch1, batch2, beta, alpha);
  const at::Tensor& out = s.maybe_get_output(0);
  const bool real = !beta.isComplex() && !alpha.isComplex();
  const double b = real ? beta.toDouble() : 0.0;
  if (real && b != 0.0 && !out.is_same(self)) {
    out.copy_(self.expand(out.sizes()));
  }
  const bool done = real && (out.numel() == 0 || run_matmul(out, batch1, batch2, alpha.toDouble(), b));
  if (!done) {
    on_host("baddbmm", out.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      at::baddbmm_out(host, host_alias(self), host_alias(batch1), host_alias(batch2), beta, alpha);
    });
  }
  return s.result();
}

at::Tensor baddbmm_functional(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                              const at::Scalar& beta, const at::Scalar& alpha) {
  return baddbmm<Variant::Functional>(self, batch1, batch2, beta, alpha);
}
at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  baddbmm<Variant::InPlace>(self, batch1, batch2, beta, alpha, self);
  return self;
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  baddbmm<Variant::Out>(self, batch1, batch2, beta, alpha, out);
  return out;
}

// dot: CPU's checks, then a 1 x n by n x 1 product into the 0-dim result.
at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  check_devices("wrapper_PrivateUse1__dot", {{"self", &self}, {"tensor", &other}});
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", other.numel(), "] to have the same number of elements, but got ", self.numel(),
              " and ", other.numel(), " elements respectively");
  at::Tensor out = at::empty({}, self.options());
  if (self.numel() == 0) {
    return out.zero_();
  }
  if (!run_matmul(out.view({1, 1}), self.view({1, -1}), other.view({-1, 1}), 1.0, 0.0)) {
    on_host("dot", self.scalar_type(), [&] {
      at::Tensor host = host_alias(out);
      host.copy_(at::dot(host_alias(self), host_alias(other)));
    });
  }
  return out;
}

at::Tensor mm_functional(const at::Tensor& self, const at::Tensor& mat2) {
  return mm<Variant::Functional>(self, mat2);
}
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  mm<Variant::Out>(self, mat2, out);
  return out;
}
at::Tensor bmm_functional(const at::Tensor& self, const at::Tensor& mat2) {
  return bmm<Variant::Functional>(self, mat2);
}
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  bmm<Variant::Out>(self, mat2, out);
  return out;
}
at::Tensor addmm_functional(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                            const at::Scalar& beta, const at::Scalar& alpha) {
  return addmm<Variant::Functional>(self, mat1, mat2, beta, alpha);
}
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  addmm<Variant::InPlace>(self, mat1, mat2, beta, alpha, self);
  return self;
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  addmm<Variant::Out>(self, mat1, mat2, beta, alpha, out);
  return out;
}

// ANCHOR: grouped_mm
// torch._grouped_mm, a mixture-of-experts layer's products. PyTorch's composite kernel copies
// the offsets to the host (`offs.cpu()` in ATen/native/GroupedMMUtils.h), which waits for the
// device once per call, and then multiplies group by group. Here one kernel reads the offsets
// on the stream. Checks, output shape and strides are ATen's own, so eager and fake tensors
// agree.
at::Tensor grouped_mm(const at::Tensor& mat_a, const at::Tensor& mat_b, const std::optional<at::Tensor>& offs,
                      const std::optional<at::Tensor>& bias, std::optional<c10::ScalarType> out_dtype) {
  check_devices("wrapper_PrivateUse1___grouped_mm",
                {{"mat_a", &mat_a}, {"mat_b", &mat_b}, {"offs", offs ? &*offs : nullptr},
                 {"bias", bias ? &*bias : nullptr}});
  at::native::_grouped_mm_validate_inputs(mat_a, mat_b, offs, bias, out_dtype);
  const auto dtype = at::native::_resolve_grouped_mm_out_dtype(mat_a, mat_b, out_dtype);
  at::Tensor out = at::native::create_grouped_gemm_output_tensor(mat_a, mat_b, offs, dtype);
  const at::Tensor a = mat_a.resolve_neg(), b = mat_b.resolve_neg();
  if (!offs.has_value()) {  // both 3-D: a batch of products
    TORCH_INTERNAL_ASSERT(run_matmul(out, a, b, 1.0, 0.0));
    return out;
  }
  const bool a_2d = a.dim() == 2, b_2d = b.dim() == 2;
  // ATen checks the contraction sizes unless both are 2-D, where its loop slices each by the
  // offsets; one kernel needs them equal.
  TORCH_CHECK(a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
  const Grouping grouping = a_2d ? (b_2d ? Grouping::Depth : Grouping::Rows) : Grouping::Columns;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() > 0) {
    call([&] {
      launch_grouped_matmul(static_cast<int8_t>(dtype), grouping, m, n, k, matrix(out), matrix(a), matrix(b),
                            dense(*offs), out.device().index());
    });
  }
  return out;
}
// ANCHOR_END: grouped_mm

} // namespace

void register_matmul() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("mm", TORCH_FN(mm_functional));
    library.impl("mm.out", TORCH_FN(mm_out));
    library.impl("bmm", TORCH_FN(bmm_functional));
    library.impl("bmm.out", TORCH_FN(bmm_out));
    library.impl("addmm", TORCH_FN(addmm_functional));
    library.impl("addmm_", TORCH_FN(addmm_));
    library.impl("addmm.out", TORCH_FN(addmm_out));
    library.impl("baddbmm", TORCH_FN(baddbmm_functional));
    library.impl("baddbmm_", TORCH_FN(baddbmm_));
    library.impl("baddbmm.out", TORCH_FN(baddbmm_out));
    library.impl("dot", TORCH_FN(dot));
    library.impl("_grouped_mm", TORCH_FN(grouped_mm));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
