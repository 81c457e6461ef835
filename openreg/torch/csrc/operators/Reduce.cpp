// Reductions with Rust kernels (src/operators/kernels/reduce.rs): the structured meta functions give the
// result's shape and dtype (and CPU's errors); a reduction TensorIterator lines the output up
// with the input, stride 0 along the reduced dimensions.

#include "operators/Structured.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/all.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/any.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/max.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/min.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/sum_meta.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

namespace openreg {
namespace {

// ANCHOR: reduction_iterator
// The result seen with the input's rank: reduced dimensions re-inserted with size 1, stride 0.
at::TensorIterator reduction_iterator(const at::Tensor& self, const at::Tensor& result,
                                      at::OptionalIntArrayRef dims, bool keepdim) {
  const int64_t ndim = self.dim();
  const auto mask = at::dim_list_to_bitset(dims.value_or(c10::IntArrayRef{}), ndim);
  const bool all = !dims || dims->empty();
  at::Tensor viewed = result;
  if (!keepdim && ndim > 0) {
    c10::SmallVector<int64_t, 6> sizes(result.sizes().begin(), result.sizes().end());
    c10::SmallVector<int64_t, 6> strides(result.strides().begin(), result.strides().end());
    for (int64_t d = 0; d < ndim; ++d) {
      if (all || mask[d]) {
        sizes.insert(sizes.begin() + d, 1);
        strides.insert(strides.begin() + d, 0);
      }
    }
    viewed = result.as_strided(sizes, strides);
  }
  return at::TensorIterator::reduce_op(viewed, self);
}
// ANCHOR_END: reduction_iterator

// Runs `op` in Rust if it handles the dtypes (float32, float16, bfloat16; integers and bool,
// exactly, except for a mean); false otherwise.
bool run_reduction(at::TensorIterator& iter, Reduction op, double count) {
  std::array<int8_t, 2> dtypes{static_cast<int8_t>(iter.dtype(0)),
                               static_cast<int8_t>(iter.dtype(1))};
  // What kernels/reduce.rs and kernels/integer.rs compute: floating types among themselves,
  // integers (and bool) among themselves for sums, maxima and minima.
  const auto floating = [](at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; };
  const auto integral = [](at::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/true); };
  const at::ScalarType out = iter.dtype(0), in = iter.dtype(1);
  if (!(floating(out) && floating(in)) && !(integral(out) && integral(in) && op != Reduction::Mean)) {
    return false;
  }
  std::array<size_t, 2> data{addr(iter.data_ptr(0)), addr(iter.data_ptr(1))};
  std::array<size_t, 4> storages{};
  for (int k = 0; k < 2; ++k) {
    const auto& storage = iter.tensor_base(k).storage();
    storages[2 * k] = addr(storage.data());
    storages[2 * k + 1] = storage.nbytes();
  }
  c10::SmallVector<int64_t, 12> strides;
  for (int k = 0; k < 2; ++k) {
    strides.append(iter.strides(k).begin(), iter.strides(k).end());
  }
  call([&] {
    launch_reduction(op, count, {data.data(), 2}, {storages.data(), 4}, {dtypes.data(), 2},
                     {iter.shape().data(), iter.shape().size()}, {strides.data(), strides.size()},
                     iter.device(0).index());
  });
  return true;
}

// ANCHOR: sum
template <Variant kind>
at::Tensor sum(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
               std::optional<at::ScalarType> dtype, const at::Tensor& given = {}) {
  Structured<at::meta::structured_sum_dim_IntList, kind> s(given);
  s.meta(self, dims, keepdim, dtype);
  const at::Tensor& result = s.maybe_get_output(0);
  if (self.numel() == 0) {
    result.zero_();  // the sum of nothing
  } else {
    auto iter = reduction_iterator(self, result, dims, keepdim);
    if (!run_reduction(iter, Reduction::Sum, 0)) {
      on_host("sum", self.scalar_type(), [&] {
        at::Tensor out = host_alias(result);
        at::sum_out(out, host_alias(self), dims, keepdim, dtype);
      });
    }
  }
  return s.result();
}
// ANCHOR_END: sum

template <Variant kind>
at::Tensor mean(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                std::optional<at::ScalarType> dtype, const at::Tensor& given = {}) {
  Structured<at::meta::structured_mean_dim, kind> s(given);
  s.meta(self, dims, keepdim, dtype);
  const at::Tensor& result = s.maybe_get_output(0);
  if (self.numel() == 0) {
    result.fill_(std::numeric_limits<double>::quiet_NaN());  // 0 / 0, as on CPU
  } else {
    auto iter = reduction_iterator(self, result, dims, keepdim);
    const double count = static_cast<double>(self.numel()) / std::max<int64_t>(result.numel(), 1);
    if (!run_reduction(iter, Reduction::Mean, count)) {
      on_host("mean", self.scalar_type(), [&] {
        at::Tensor out = host_alias(result);
        at::mean_out(out, host_alias(self), dims, keepdim, dtype);
      });
    }
  }
  return s.result();
}

template <Variant kind>
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dims, bool keepdim,
                const at::Tensor& given = {}) {
  Structured<at::meta::structured_amax, kind> s(given);
  s.meta(self, dims, keepdim);  // rejects empty reductions, as on CPU
  const at::Tensor& result = s.maybe_get_output(0);
  if (result.numel() > 0) {
    auto iter = reduction_iterator(self, result, dims, keepdim);
    if (!run_reduction(iter, Reduction::Amax, 0)) {
      on_host("amax", self.scalar_type(), [&] {
        at::Tensor out = host_alias(result);
        at::amax_out(out, host_alias(self), dims, keepdim);
      });
    }
  }
  return s.result();
}

template <Variant kind>
at::Tensor amin(const at::Tensor& self, at::IntArrayRef dims, bool keepdim,
                const at::Tensor& given = {}) {
  Structured<at::meta::structured_amin, kind> s(given);
  s.meta(self, dims, keepdim);
  const at::Tensor& result = s.maybe_get_output(0);
  if (result.numel() > 0) {
    auto iter = reduction_iterator(self, result, dims, keepdim);
    if (!run_reduction(iter, Reduction::Amin, 0)) {
      on_host("amin", self.scalar_type(), [&] {
        at::Tensor out = host_alias(result);
        at::amin_out(out, host_alias(self), dims, keepdim);
      });
    }
  }
  return s.result();
}

// ANCHOR: any_all
// any() and all() of a bool tensor are its maximum and minimum; other dtypes (any(x) means
// x != 0 somewhere) take CPU's kernel.
template <class Meta, Variant kind>
at::Tensor any_all(bool any, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                   const at::Tensor& given = {}) {
  Structured<Meta, kind> s(given);
  if constexpr (std::is_same_v<Meta, at::meta::structured_any> || std::is_same_v<Meta, at::meta::structured_all>) {
    s.meta(self);
  } else if constexpr (std::is_same_v<Meta, at::meta::structured_any_dim> ||
                       std::is_same_v<Meta, at::meta::structured_all_dim>) {
    s.meta(self, (*dims)[0], keepdim);
  } else {
    s.meta(self, dims, keepdim);
  }
  const at::Tensor& result = s.maybe_get_output(0);
  if (self.numel() == 0) {
    result.fill_(!any);  // any of nothing is false, all of nothing true
  } else {
    auto iter = reduction_iterator(self, result, dims, keepdim);
    if (self.scalar_type() != at::kBool || !run_reduction(iter, any ? Reduction::Amax : Reduction::Amin, 0)) {
      on_host(any ? "any" : "all", self.scalar_type(), [&] {
        at::Tensor out = host_alias(result);
        if (any) {
          at::any_out(out, host_alias(self), dims, keepdim);
        } else {
          at::all_out(out, host_alias(self), dims, keepdim);
        }
      });
    }
  }
  return s.result();
}
// ANCHOR_END: any_all

at::Tensor any_all_(const at::Tensor& self) {
  return any_all<at::meta::structured_any, Variant::Functional>(true, self, std::nullopt, false);
}
at::Tensor& any_all_out(const at::Tensor& self, at::Tensor& out) {
  any_all<at::meta::structured_any, Variant::Out>(true, self, std::nullopt, false, out);
  return out;
}
at::Tensor all_all_(const at::Tensor& self) {
  return any_all<at::meta::structured_all, Variant::Functional>(false, self, std::nullopt, false);
}
at::Tensor& all_all_out(const at::Tensor& self, at::Tensor& out) {
  any_all<at::meta::structured_all, Variant::Out>(false, self, std::nullopt, false, out);
  return out;
}
at::Tensor any_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  return any_all<at::meta::structured_any_dims, Variant::Functional>(true, self, dims, keepdim);
}
at::Tensor& any_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out) {
  any_all<at::meta::structured_any_dims, Variant::Out>(true, self, dims, keepdim, out);
  return out;
}
at::Tensor all_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  return any_all<at::meta::structured_all_dims, Variant::Functional>(false, self, dims, keepdim);
}
at::Tensor& all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out) {
  any_all<at::meta::structured_all_dims, Variant::Out>(false, self, dims, keepdim, out);
  return out;
}
// One dimension: the dims form over {dim} (the metas agree on shapes and errors).
at::Tensor any_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return any_all<at::meta::structured_any_dim, Variant::Functional>(true, self, c10::IntArrayRef{dim}, keepdim);
}
at::Tensor& any_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  any_all<at::meta::structured_any_dim, Variant::Out>(true, self, c10::IntArrayRef{dim}, keepdim, out);
  return out;
}
at::Tensor all_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return any_all<at::meta::structured_all_dim, Variant::Functional>(false, self, c10::IntArrayRef{dim}, keepdim);
}
at::Tensor& all_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  any_all<at::meta::structured_all_dim, Variant::Out>(false, self, c10::IntArrayRef{dim}, keepdim, out);
  return out;
}

// max() and min() of a whole tensor: amax and amin over every dimension, with CPU's error
// for an empty tensor.
at::Tensor extremum_all(const at::Tensor& self, bool max) {
  TORCH_CHECK(self.numel() > 0, max ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  at::Tensor result = at::empty({}, self.options());
  auto iter = reduction_iterator(self, result, std::nullopt, false);
  if (!run_reduction(iter, max ? Reduction::Amax : Reduction::Amin, 0)) {
    on_host(max ? "max" : "min", self.scalar_type(), [&] {
      at::Tensor out = host_alias(result);
      out.copy_(max ? at::max(host_alias(self)) : at::min(host_alias(self)));
    });
  }
  return result;
}
at::Tensor max_all(const at::Tensor& self) {
  return extremum_all(self, true);
}
at::Tensor min_all(const at::Tensor& self) {
  return extremum_all(self, false);
}
at::Tensor amin_dim(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  return amin<Variant::Functional>(self, dims, keepdim);
}
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  amin<Variant::Out>(self, dims, keepdim, out);
  return out;
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                   std::optional<at::ScalarType> dtype) {
  return sum<Variant::Functional>(self, dims, keepdim, dtype);
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  sum<Variant::Out>(self, dims, keepdim, dtype, out);
  return out;
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  return mean<Variant::Functional>(self, dims, keepdim, dtype);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  mean<Variant::Out>(self, dims, keepdim, dtype, out);
  return out;
}

at::Tensor amax_dim(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  return amax<Variant::Functional>(self, dims, keepdim);
}

at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  amax<Variant::Out>(self, dims, keepdim, out);
  return out;
}

// ANCHOR: rows
// argmax/argmin and cumsum work along one dimension: it is moved last and the input made
// contiguous (a copy unless it already is), so the kernel walks plain rows.
at::Tensor as_rows(const at::Tensor& self, std::optional<int64_t> dim) {
  const at::Tensor flat = self.dim() == 0 ? self.reshape({1}) : self;
  return (dim ? flat.movedim(at::maybe_wrap_dim(*dim, self.dim()), -1) : flat.reshape({-1})).contiguous();
}

template <class Meta, Variant kind>
at::Tensor arg_extremum(bool max, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                        const at::Tensor& given = {}) {
  Structured<Meta, kind> s(given);
  s.meta(self, dim, keepdim);
  const at::Tensor& result = s.maybe_get_output(0);
  if (result.numel() > 0) {
    const at::Tensor rows = as_rows(self, dim);
    const int64_t len = rows.size(-1);
    at::Tensor out = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
    if (call([&] { return launch_arg_extremum(max, rows.numel() / len, len, dense(rows), dense(out), self.device().index()); })) {
      if (!out.is_same(result)) {
        result.copy_(out);
      }
    } else {
      on_host(max ? "argmax" : "argmin", self.scalar_type(), [&] {
        at::Tensor host = host_alias(result);
        max ? at::argmax_out(host, host_alias(self), dim, keepdim) : at::argmin_out(host, host_alias(self), dim, keepdim);
      });
    }
  }
  return s.result();
}

// ANCHOR: extremum_dim
// max.dim and min.dim: the index from the argmax/argmin kernel and the value gathered at that
// index, so that both name one element: the first extremum, a NaN before any number, as CPU's.
// (bool has no argmax kernel on CPU either; its index is found on its bytes.)
template <class Meta, Variant kind>
std::tuple<at::Tensor, at::Tensor> extremum_dim(bool max, const at::Tensor& self, int64_t dim,
                                                bool keepdim, const at::Tensor& values = {},
                                                const at::Tensor& indices = {}) {
  check_devices(max ? "max" : "min", {{"self", &self}, {"values", &values}, {"indices", &indices}});
  Structured<Meta, kind> s(values, indices);
  s.meta(self, dim, keepdim);
  const at::Tensor &v = s.maybe_get_output(0), &i = s.maybe_get_output(1);
  if (v.numel() > 0) {
    // A 0-dim tensor is its own extremum, at index 0; as [1] it takes the same path.
    const at::Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
    const int64_t d = at::maybe_wrap_dim(dim, x.dim());
    const at::Tensor keys = x.scalar_type() == at::kBool ? x.to(at::kByte) : x;
    const at::Tensor index = max ? at::argmax(keys, d, true) : at::argmin(keys, d, true);
    const at::Tensor picked = x.gather(d, index);
    const bool squeeze = !keepdim || self.dim() == 0;
    v.copy_(squeeze ? picked.squeeze(d) : picked);
    i.copy_(squeeze ? index.squeeze(d) : index);
  }
  return {s.result(0), s.result(1)};
}
// ANCHOR_END: extremum_dim

template <Variant kind>
at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, const at::Tensor& given = {}) {
  Structured<at::meta::structured_cumsum, kind> s(given);
  s.meta(self, dim, dtype);
  const at::Tensor& result = s.maybe_get_output(0);
  check_overlap(result, {&self});  // CPU's kernel writes through a TensorIterator
  if (result.numel() > 0) {
    // CPU's cumsum first converts the input to the result's dtype.
    const at::Tensor rows = as_rows(self.to(result.scalar_type()), dim);
    const int64_t len = rows.size(-1);
    const at::Tensor out = at::empty_like(rows);
    if (call([&] { return launch_cumsum(rows.numel() / len, len, dense(rows), dense(out), self.device().index()); })) {
      const int64_t d = self.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, self.dim());
      result.copy_(out.movedim(-1, d).reshape(result.sizes()));
    } else {
      on_host("cumsum", self.scalar_type(), [&] {
        at::Tensor host = host_alias(result);
        at::cumsum_out(host, host_alias(self), dim, dtype);
      });
    }
  }
  return s.result();
}
// ANCHOR_END: rows

at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum<at::meta::structured_argmax, Variant::Functional>(true, self, dim, keepdim);
}
at::Tensor& argmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  arg_extremum<at::meta::structured_argmax, Variant::Out>(true, self, dim, keepdim, out);
  return out;
}
at::Tensor argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum<at::meta::structured_argmin, Variant::Functional>(false, self, dim, keepdim);
}
at::Tensor& argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  arg_extremum<at::meta::structured_argmin, Variant::Out>(false, self, dim, keepdim, out);
  return out;
}
at::Tensor cumsum_functional(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return cumsum<Variant::Functional>(self, dim, dtype);
}
at::Tensor& cumsum_(at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  cumsum<Variant::InPlace>(self, dim, dtype, self);
  return self;
}
at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  cumsum<Variant::Out>(self, dim, dtype, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extremum_dim<at::meta::structured_max_dim, Variant::Functional>(true, self, dim, keepdim);
}

std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  extremum_dim<at::meta::structured_max_dim, Variant::Out>(true, self, dim, keepdim, values, indices);
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extremum_dim<at::meta::structured_min_dim, Variant::Functional>(false, self, dim, keepdim);
}

std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  extremum_dim<at::meta::structured_min_dim, Variant::Out>(false, self, dim, keepdim, values, indices);
  return {values, indices};
}

} // namespace

void register_reductions() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("sum.dim_IntList", TORCH_FN(sum_dim));
    library.impl("sum.IntList_out", TORCH_FN(sum_out));
    library.impl("mean.dim", TORCH_FN(mean_dim));
    library.impl("mean.out", TORCH_FN(mean_out));
    library.impl("amax", TORCH_FN(amax_dim));
    library.impl("amax.out", TORCH_FN(amax_out));
    library.impl("amin", TORCH_FN(amin_dim));
    library.impl("amin.out", TORCH_FN(amin_out));
    library.impl("any", TORCH_FN(any_all_));
    library.impl("any.all_out", TORCH_FN(any_all_out));
    library.impl("all", TORCH_FN(all_all_));
    library.impl("all.all_out", TORCH_FN(all_all_out));
    library.impl("any.dims", TORCH_FN(any_dims));
    library.impl("all.dims", TORCH_FN(all_dims));
    library.impl("any.dims_out", TORCH_FN(any_dims_out));
    library.impl("all.dims_out", TORCH_FN(all_dims_out));
    library.impl("any.dim", TORCH_FN(any_dim));
    library.impl("any.out", TORCH_FN(any_dim_out));
    library.impl("all.dim", TORCH_FN(all_dim));
    library.impl("all.out", TORCH_FN(all_dim_out));
    library.impl("max", TORCH_FN(max_all));
    library.impl("max.dim", TORCH_FN(max_dim));
    library.impl("max.dim_max", TORCH_FN(max_dim_out));
    library.impl("min.dim", TORCH_FN(min_dim));
    library.impl("min.dim_min", TORCH_FN(min_dim_out));
    library.impl("min", TORCH_FN(min_all));
    library.impl("argmax", TORCH_FN(argmax));
    library.impl("argmax.out", TORCH_FN(argmax_out));
    library.impl("argmin", TORCH_FN(argmin));
    library.impl("argmin.out", TORCH_FN(argmin_out));
    library.impl("cumsum", TORCH_FN(cumsum_functional));
    library.impl("cumsum_", TORCH_FN(cumsum_));
    library.impl("cumsum.out", TORCH_FN(cumsum_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
