// Reductions with Rust kernels (src/operators/kernels/reduce.rs): the structured meta functions give the
// result's shape and dtype (and CPU's errors); a reduction TensorIterator lines the output up
// with the input, stride 0 along the reduced dimensions.

#include "operators/Structured.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amax_meta.h>
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

// Runs `op` in Rust if it handles the dtypes; false otherwise.
bool run_reduction(at::TensorIterator& iter, Reduction op, double count) {
  std::array<int8_t, 2> dtypes{static_cast<int8_t>(iter.dtype(0)),
                               static_cast<int8_t>(iter.dtype(1))};
  for (auto d : dtypes) {
    if (d != static_cast<int8_t>(at::kFloat) && d != static_cast<int8_t>(at::kHalf) &&
        d != static_cast<int8_t>(at::kBFloat16)) {
      return false;
    }
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
      note_host_path("sum", self.scalar_type());
      at::Tensor out = host_alias(result);
      at::sum_out(out, host_alias(self), dims, keepdim, dtype);
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
      note_host_path("mean", self.scalar_type());
      at::Tensor out = host_alias(result);
      at::mean_out(out, host_alias(self), dims, keepdim, dtype);
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
      note_host_path("amax", self.scalar_type());
      at::Tensor out = host_alias(result);
      at::amax_out(out, host_alias(self), dims, keepdim);
    }
  }
  return s.result();
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
    return true;
  }();
  (void)registered;
}

} // namespace openreg
