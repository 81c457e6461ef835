// An embedding on the device: its forward is index_select on the weight's rows, its backward
// embedding_dense_backward. Neither reads the index values on the host, which would wait for
// everything queued before: their kernels read them on the stream, as nll_loss's does, and an
// index out of range is the stream's IndexError (at the call when the stream was idle, else at
// its next synchronize, as a GPU reports a device-side assert). Rust kernels:
// src/operators/kernels/embedding.rs.

#include "operators/Structured.h"

#include <ATen/ops/embedding_dense_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/zeros.h>
#include <ATen/native/Resize.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  check_devices("index_select_out", {{"self", &self}, {"index", &index}, {"out", &out}});
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  TORCH_CHECK(!(self.dim() == 0 && index.numel() != 1),
              "index_select(): Index to scalar can have only 1 value, got ", index.numel(), " value(s)");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "index_select(): self and result must have the same scalar type");
  // CPU's checks (index_select_out_cpu_): out= may not overlap itself, self or the index.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) {
    sizes[dim] = index.numel();
  }
  at::native::resize_output(out, sizes);
  const at::Tensor src = self.contiguous();
  const at::Tensor dst = out.is_contiguous() ? out : at::empty(sizes, out.options());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    (d < dim ? outer : inner) *= d == dim ? 1 : self.size(d);
  }
  const at::Tensor indices = index.to(at::kLong).contiguous();  // int32: converted on the stream
  call([&] {
    index_select(dense(src), dense(dst), self.element_size(), dense(indices), outer, size, inner,
                 self.device().index());
  });
  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
  return out;
}

at::Tensor index_select_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

// ANCHOR: embedding_backward
// The index values stay on the device: the kernel reads them on the stream, and one out of range
// is the stream's IndexError at its next synchronize. Read here, they would make the host wait
// for the whole backward pass queued before this, the last step of a language model's.
at::Tensor dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                              int64_t num_weights, int64_t padding_idx, bool scale_grad_by_freq) {
  check_devices("embedding_dense_backward", {{"grad_output", &grad_output}, {"indices", &indices}});
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_dense_backward: indices must be int64 or int32, got ", indices.scalar_type());
  const int64_t dim = grad_output.size(-1);
  TORCH_CHECK(grad_output.numel() == indices.numel() * dim,
              "embedding_dense_backward: grad_output of size ", grad_output.sizes(),
              " does not match indices of size ", indices.sizes());
  at::Tensor grad_weight = at::empty({num_weights, dim}, grad_output.options());
  const at::Tensor index = indices.to(at::kLong).contiguous();  // int32: converted on the stream
  const bool done = call([&] {
    return openreg::embedding_backward(dense(grad_weight), dense(grad_output.contiguous()), dense(index), dim,
                                       padding_idx, scale_grad_by_freq, grad_output.device().index());
  });
  if (!done) {
    on_host("embedding_dense_backward", grad_output.scalar_type(), [&] {
      host_alias(grad_weight).copy_(at::embedding_dense_backward(
          host_alias(grad_output), host_alias(indices), num_weights, padding_idx, scale_grad_by_freq));
    });
  }
  return grad_weight;
}
// ANCHOR_END: embedding_backward

} // namespace

void register_embedding() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("index_select", TORCH_FN(index_select_functional));
    library.impl("index_select.out", TORCH_FN(index_select_out));
    library.impl("embedding_dense_backward", TORCH_FN(dense_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
