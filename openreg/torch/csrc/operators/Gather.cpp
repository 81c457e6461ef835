// gather: out[i][j][k] = self[index[i][j][k]][j][k] (for dim 0). The structured meta function
// checks the dimensions and dtypes and sizes the output; the values of `index` are read on the
// host, as embedding's are, checked with CPU's message, and turned into element offsets; the
// device then moves the elements with the byte-gather kernel index_select uses.
// scatter and scatter_add are the reverse: the same offsets, now of the elements written in
// the result, each taking the element of `src` at the index entry's own position (or `value`).
// masked_select is the same gather, at the offsets of the mask's true elements (read on the
// host: the result's size depends on them, so the call waits for the device, as on CUDA).

#include "operators/Structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scatter.h>
#include <ATen/ops/scatter_add.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
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
    gather_rows(dense(src), dense(target), self.element_size(), {offsets.data(), offsets.size()},
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

// ANCHOR: scatter
// The element offsets, in a tensor of `strides`, that each entry of `index` (int64 values on the
// host) addresses along `dim`: its own coordinates, the one along `dim` replaced by its value.
std::vector<int64_t> scatter_offsets(const at::Tensor& index, const int64_t* values, int64_t dim, int64_t size,
                                     c10::IntArrayRef strides, bool use_value) {
  const int64_t ndim = index.dim();
  std::vector<int64_t> coord(ndim, 0), offsets(index.numel());
  for (int64_t n = 0; n < index.numel(); ++n) {
    const int64_t v = values[n];
    TORCH_CHECK(!use_value || (v >= 0 && v < size), "index ", v, " is out of bounds for dimension ", dim,
                " with size ", size);
    int64_t offset = 0;
    for (int64_t d = 0; d < ndim; ++d) {
      offset += (d == dim && use_value ? v : coord[d]) * (d < static_cast<int64_t>(strides.size()) ? strides[d] : 0);
    }
    offsets[n] = offset;
    for (int64_t d = ndim - 1; d >= 0 && ++coord[d] == index.size(d); --d) {
      coord[d] = 0;
    }
  }
  return offsets;
}

// out = self, then out[..., index[i], ...] = src[..., i, ...] (+= with accumulate), or `value`.
template <class Meta, Variant kind>
at::Tensor scatter(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                   const std::optional<at::Scalar>& value, bool accumulate, const at::Tensor& given = {}) {
  check_devices("scatter", {{"self", &self}, {"index", &index}, {"src", &src}, {"out", &given}});
  Structured<Meta, kind> s(kind == Variant::InPlace ? self : given);
  if constexpr (std::is_same_v<Meta, at::meta::structured_scatter_value>) {
    s.meta(self, dim, index, *value);
  } else {
    s.meta(self, dim, index, src);
  }
  const at::Tensor& out = s.maybe_get_output(0);
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() == 0) {
    return s.result();
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const at::Tensor target = out.is_contiguous() ? out : out.contiguous();
  const at::Tensor host = host_alias(index.contiguous()).to(at::kLong);  // waits for the device
  const int64_t size = self.dim() == 0 ? 1 : self.size(dim);
  const std::vector<int64_t> where = scatter_offsets(index, host.const_data_ptr<int64_t>(), dim, size,
                                                     target.strides(), true);
  at::Tensor values;
  if (value) {
    values = at::full({index.numel()}, *value, out.options());
  } else {
    const at::Tensor source = src.contiguous();
    const std::vector<int64_t> from = scatter_offsets(index, host.const_data_ptr<int64_t>(), dim, size,
                                                      source.strides(), false);
    values = at::empty({index.numel()}, out.options());
    call([&] {
      gather_rows(dense(source), dense(values), source.element_size(), {from.data(), from.size()}, 1,
                   static_cast<size_t>(source.numel()), 1, self.device().index());
    });
  }
  const bool done = call([&] {
    return launch_index_put(dense(target), {where.data(), where.size()}, dense(values), accumulate,
                            self.device().index());
  });
  if (!done) {
    on_host(accumulate ? "scatter_add" : "scatter", self.scalar_type(), [&] {
      at::Tensor t = host_alias(target);
      if (value) {
        t.scatter_(dim, host_alias(index), *value);
      } else if (accumulate) {
        t.scatter_add_(dim, host_alias(index), host_alias(src));
      } else {
        t.scatter_(dim, host_alias(index), host_alias(src));
      }
    });
  }
  if (!target.is_same(out)) {
    out.copy_(target);
  }
  return s.result();
}

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter<at::meta::structured_scatter_src, Variant::Functional>(self, dim, index, src, std::nullopt, false);
}
at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  scatter<at::meta::structured_scatter_src, Variant::InPlace>(self, dim, index, src, std::nullopt, false);
  return self;
}
at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  scatter<at::meta::structured_scatter_src, Variant::Out>(self, dim, index, src, std::nullopt, false, out);
  return out;
}
at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  return scatter<at::meta::structured_scatter_value, Variant::Functional>(self, dim, index, {}, value, false);
}
at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  scatter<at::meta::structured_scatter_value, Variant::InPlace>(self, dim, index, {}, value, false);
  return self;
}
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out) {
  scatter<at::meta::structured_scatter_value, Variant::Out>(self, dim, index, {}, value, false, out);
  return out;
}
at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter<at::meta::structured_scatter_add, Variant::Functional>(self, dim, index, src, std::nullopt, true);
}
at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  scatter<at::meta::structured_scatter_add, Variant::InPlace>(self, dim, index, src, std::nullopt, true);
  return self;
}
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
  scatter<at::meta::structured_scatter_add, Variant::Out>(self, dim, index, src, std::nullopt, true, out);
  return out;
}
// ANCHOR_END: scatter

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
      gather_rows(dense(src), dense(out), self.element_size(), {offsets.data(), offsets.size()},
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
    library.impl("scatter.src", TORCH_FN(scatter_src));
    library.impl("scatter_.src", TORCH_FN(scatter_src_));
    library.impl("scatter.src_out", TORCH_FN(scatter_src_out));
    library.impl("scatter.value", TORCH_FN(scatter_value));
    library.impl("scatter_.value", TORCH_FN(scatter_value_));
    library.impl("scatter.value_out", TORCH_FN(scatter_value_out));
    library.impl("scatter_add", TORCH_FN(scatter_add));
    library.impl("scatter_add_", TORCH_FN(scatter_add_));
    library.impl("scatter_add.out", TORCH_FN(scatter_add_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
