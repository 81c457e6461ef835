// gather: out[i][j][k] = self[index[i][j][k]][j][k] (for dim 0). The structured meta function
// checks the dimensions and dtypes and sizes the output; the values of `index` are read on the
// host, as embedding's are, checked with CPU's message, and turned into element offsets; the
// device then moves the elements with the byte-gather kernel index_select uses.
// masked_select is the same gather, at the offsets of the mask's true elements (read on the
// host: the result's size depends on them, so the call waits for the device, as on CUDA).

#include "operators/Structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/gather_meta.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

namespace openreg {
namespace {

void gather_into(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& out) {
  if (index.numel() == 0) {
    return;
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const at::Tensor src = self.contiguous();
  const at::Tensor host = host_alias(index.contiguous()).to(at::kLong);  // int32 indices too, as CPU
  const int64_t* values = host.const_data_ptr<int64_t>();
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  // The offset of each gathered element in the contiguous source: index's coordinates, with
  // the one along `dim` replaced by the index value.
  const int64_t ndim = index.dim();
  std::vector<int64_t> coord(ndim, 0), offsets(index.numel());
  for (int64_t n = 0; n < index.numel(); ++n) {
    const int64_t v = values[n];
    TORCH_CHECK(v >= 0 && v < size, "index ", v, " is out of bounds for dimension ", dim, " with size ", size);
    int64_t offset = 0;
    for (int64_t d = 0; d < ndim; ++d) {
      // A 0-dim self takes a 1-element index of one dimension: no stride to follow.
      offset += (d == dim ? v : coord[d]) * (d < src.dim() ? src.stride(d) : 0);
    }
    offsets[n] = offset;
    for (int64_t d = ndim - 1; d >= 0 && ++coord[d] == index.size(d); --d) {
      coord[d] = 0;
    }
  }
  const at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  call([&] {
    index_select(dense(src), dense(target), self.element_size(), {offsets.data(), offsets.size()},
                 /*outer=*/1, /*size=*/static_cast<size_t>(src.numel()), /*inner=*/1, self.device().index());
  });
  if (!target.is_same(out)) {
    out.copy_(target);
  }
}

template <Variant kind>
at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                  const at::Tensor& given = {}) {
  check_devices("gather", {{"self", &self}, {"index", &index}, {"out", &given}});
  Structured<at::meta::structured_gather, kind> s(given);
  s.meta(self, dim, index, sparse_grad);
  gather_into(self, dim, index, s.maybe_get_output(0));
  return s.result();
}

at::Tensor gather_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  return gather<Variant::Functional>(self, dim, index, sparse_grad);
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                       at::Tensor& out) {
  gather<Variant::Out>(self, dim, index, sparse_grad, out);
  return out;
}

// ANCHOR: masked_select
at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  check_devices("masked_select", {{"self", &self}, {"mask", &mask}});
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const at::Tensor where = *std::get<0>(at::expand_outplace(mask, self));  // CPU's order, for its message
  const at::Tensor src = self.contiguous();
  // The broadcast self's strides over the contiguous self (0 along broadcast dimensions).
  const at::Tensor view = src.expand(where.sizes());
  const at::Tensor host_mask = host_alias(where.contiguous());
  const bool* chosen = host_mask.const_data_ptr<bool>();
  const int64_t ndim = view.dim();
  std::vector<int64_t> coord(ndim, 0), offsets;
  for (int64_t n = 0; n < host_mask.numel(); ++n) {
    if (chosen[n]) {
      int64_t offset = 0;
      for (int64_t d = 0; d < ndim; ++d) {
        offset += coord[d] * view.stride(d);
      }
      offsets.push_back(offset);
    }
    for (int64_t d = ndim - 1; d >= 0 && ++coord[d] == view.size(d); --d) {
      coord[d] = 0;
    }
  }
  at::Tensor out = at::empty({static_cast<int64_t>(offsets.size())}, self.options());
  if (!offsets.empty()) {
    call([&] {
      index_select(dense(src), dense(out), self.element_size(), {offsets.data(), offsets.size()},
                   /*outer=*/1, /*size=*/static_cast<size_t>(src.numel()), /*inner=*/1,
                   self.device().index());
    });
  }
  return out;
}
// ANCHOR_END: masked_select

} // namespace

void register_gather() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("gather", TORCH_FN(gather_functional));
    library.impl("gather.out", TORCH_FN(gather_out));
    library.impl("masked_select", TORCH_FN(masked_select));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
