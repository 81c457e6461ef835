// sort and topk. The structured meta functions check the arguments and size the outputs (CPU's
// errors); the sorted dimension is moved last and made contiguous, and a Rust kernel sorts each
// row on the stream (src/operators/kernels/sort.rs), stably: equal elements keep their order,
// NaN sorts above every number. topk keeps the first k of each sorted row. Integer topk runs
// CPU's kernel, whose order among equal values (a partial sort's) is CPU's own.

#include "operators/Structured.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/topk_meta.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: sort_rows
// Sorts `self` along `dim`, keeping the first `keep` of each row, into `values` and
// `indices` (sized by the meta function). False if the kernel does not read the dtype.
bool sort_rows(const at::Tensor& self, int64_t dim, int64_t keep, bool descending, const at::Tensor& values,
               const at::Tensor& indices) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const at::Tensor rows = self.dim() == 0 ? self.reshape({1}) : self.movedim(dim, -1).contiguous();
  const int64_t len = rows.dim() == 0 ? 1 : rows.size(-1);
  std::vector<int64_t> shape(rows.sizes().begin(), rows.sizes().end());
  shape.back() = keep;
  const at::Tensor v = at::empty(shape, rows.options()), i = at::empty(shape, rows.options().dtype(at::kLong));
  const bool done = call([&] {
    return launch_sort(len == 0 ? 0 : rows.numel() / len, len, keep, dense(rows), dense(v), dense(i), descending,
                       self.device().index());
  });
  if (done) {
    values.copy_(self.dim() == 0 ? v.reshape({}) : v.movedim(-1, dim));
    indices.copy_(self.dim() == 0 ? i.reshape({}) : i.movedim(-1, dim));
  }
  return done;
}
// ANCHOR_END: sort_rows

template <Variant kind>
std::tuple<at::Tensor, at::Tensor> sort(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                        bool descending, const at::Tensor& values = {},
                                        const at::Tensor& indices = {}) {
  check_devices("sort", {{"self", &self}, {"values", &values}, {"indices", &indices}});
  Structured<at::meta::structured_sort_stable, kind> s(values, indices);
  s.meta(self, stable, dim, descending);
  const at::Tensor &v = s.maybe_get_output(0), &i = s.maybe_get_output(1);
  check_overlap(v, {&self});  // CPU's sort writes through iterators that refuse these
  check_overlap(i, {&self});
  if (self.numel() > 0 && !sort_rows(self, dim, self.dim() == 0 ? 1 : self.size(dim), descending, v, i)) {
    on_host("sort", self.scalar_type(), [&] {
      at::Tensor hv = host_alias(v), hi = host_alias(i);
      at::sort_outf(host_alias(self), stable, dim, descending, hv, hi);
    });
  }
  return {s.result(0), s.result(1)};
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending) {
  return sort<Variant::Functional>(self, stable, dim, descending);
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self, std::optional<bool> stable,
                                                         int64_t dim, bool descending, at::Tensor& values,
                                                         at::Tensor& indices) {
  sort<Variant::Out>(self, stable, dim, descending, values, indices);
  return {values, indices};
}

template <Variant kind>
std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted,
                                        const at::Tensor& values = {}, const at::Tensor& indices = {}) {
  check_devices("topk", {{"self", &self}, {"values", &values}, {"indices", &indices}});
  Structured<at::meta::structured_topk, kind> s(values, indices);
  s.meta(self, k, dim, largest, sorted);
  const at::Tensor &v = s.maybe_get_output(0), &i = s.maybe_get_output(1);
  const bool floating = at::isFloatingType(self.scalar_type());
  if (k > 0 && self.numel() > 0 && !(floating && sort_rows(self, dim, k, largest, v, i))) {
    on_host("topk", self.scalar_type(), [&] {
      at::Tensor hv = host_alias(v), hi = host_alias(i);
      at::topk_outf(host_alias(self), k, dim, largest, sorted, hv, hi);
    });
  }
  return {s.result(0), s.result(1)};
}

std::tuple<at::Tensor, at::Tensor> topk_functional(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                                   bool sorted) {
  return topk<Variant::Functional>(self, k, dim, largest, sorted);
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                               bool sorted, at::Tensor& values, at::Tensor& indices) {
  topk<Variant::Out>(self, k, dim, largest, sorted, values, indices);
  return {values, indices};
}

} // namespace

void register_sorting() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("sort.stable", TORCH_FN(sort_stable));
    library.impl("sort.values_stable", TORCH_FN(sort_values_stable));
    library.impl("topk", TORCH_FN(topk_functional));
    library.impl("topk.values", TORCH_FN(topk_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
