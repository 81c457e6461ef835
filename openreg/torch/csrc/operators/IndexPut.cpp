// index_put_ (`x[idx] = v`, `x[rows, cols] += v` with accumulate): integer index tensors,
// broadcast together, with CPU's rules for where the indexed dimensions land in the result.
// The indices are read on the host — CPU raises IndexError for an index out of range, and
// that needs their values — and turned into element offsets; a Rust kernel then writes the
// values at those offsets on the stream. Bool masks and dtypes the kernel lacks take CPU's
// kernel over the device memory.

#include "operators/Structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/_index_put_impl.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

namespace openreg {
namespace {

// ANCHOR: offsets
// The element offset (from self's first element) of every element of the indexing result, in
// the result's row-major order. `dims`: the indexed dimensions; `index`: their broadcast index
// tensors, as int64 on the host.
std::vector<int64_t> offsets(const at::Tensor& self, const std::vector<int64_t>& dims,
                             const std::vector<at::Tensor>& index, std::vector<int64_t>& result_shape) {
  const auto broadcast = index[0].sizes();
  bool adjacent = true;
  for (size_t k = 1; k < dims.size(); ++k) {
    adjacent = adjacent && dims[k] == dims[k - 1] + 1;
  }
  // Each result dimension is a broadcast-index dimension (-1 - j) or a dimension of self (d).
  std::vector<int64_t> source;
  const auto indexed = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  const int64_t first = adjacent ? dims.front() : 0;
  for (int64_t d = 0; d < first; ++d) {
    source.push_back(d);
  }
  for (size_t j = 0; j < broadcast.size(); ++j) {
    source.push_back(-1 - static_cast<int64_t>(j));
  }
  for (int64_t d = first; d < self.dim(); ++d) {
    if (!indexed(d)) {
      source.push_back(d);
    }
  }
  result_shape.clear();
  for (int64_t s : source) {
    result_shape.push_back(s >= 0 ? self.size(s) : broadcast[-1 - s]);
  }
  int64_t n = 1;
  for (int64_t s : result_shape) {
    n *= s;
  }
  std::vector<const int64_t*> values;
  for (const auto& t : index) {
    values.push_back(t.const_data_ptr<int64_t>());
  }
  std::vector<int64_t> out;
  out.reserve(n);
  std::vector<int64_t> position(result_shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0, flat = 0;  // `flat`: the position within the broadcast indices
    for (size_t r = 0; r < source.size(); ++r) {
      if (source[r] >= 0) {
        offset += position[r] * self.stride(source[r]);
      } else {
        flat = flat * broadcast[-1 - source[r]] + position[r];
      }
    }
    for (size_t k = 0; k < dims.size(); ++k) {
      const int64_t size = self.size(dims[k]);
      int64_t v = values[k][flat];
      TORCH_CHECK_INDEX(v >= -size && v < size, "index ", v, " is out of bounds for dimension ", dims[k],
                        " with size ", size);
      offset += (v < 0 ? v + size : v) * self.stride(dims[k]);
    }
    out.push_back(offset);
    for (int64_t r = static_cast<int64_t>(position.size()) - 1; r >= 0; --r) {  // the next position
      if (++position[r] < result_shape[r]) {
        break;
      }
      position[r] = 0;
    }
  }
  return out;
}
// ANCHOR_END: offsets

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  std::vector<int64_t> dims;
  std::vector<at::Tensor> index;
  bool native = values.scalar_type() == self.scalar_type() && values.device() == self.device() &&
                (self.scalar_type() == at::kFloat || self.scalar_type() == at::kHalf ||
                 self.scalar_type() == at::kBFloat16);
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor> t = indices.get(d);
    if (t.has_value() && t->defined()) {
      native = native && (t->scalar_type() == at::kLong || t->scalar_type() == at::kInt);
      dims.push_back(static_cast<int64_t>(d));
      index.push_back(*t);
    }
  }
  if (native && !index.empty()) {
    std::vector<at::Tensor> expanded;
    try {
      expanded = at::expand_outplace(index);
    } catch (const std::exception&) {
      TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together");
    }
    for (auto& t : expanded) {
      t = t.to(at::kCPU, at::kLong).contiguous();  // waits for the device: the values are needed
    }
    std::vector<int64_t> shape;
    const std::vector<int64_t> where = offsets(self, dims, expanded, shape);
    TORCH_CHECK(at::is_expandable_to(values.sizes(), shape), "shape mismatch: value tensor of shape ",
                values.sizes(), " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(shape));
    const at::Tensor v = values.expand(shape).contiguous();
    const bool done = call([&] {
      return launch_index_put(dense(self), {where.data(), where.size()}, dense(v), accumulate,
                              self.device().index());
    });
    if (done) {
      return self;
    }
  }
  note_host_path("index_put_", self.scalar_type());
  c10::List<std::optional<at::Tensor>> host_indices;
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor> t = indices.get(d);
    host_indices.push_back(t.has_value() && t->defined() ? std::optional<at::Tensor>(t->cpu()) : std::nullopt);
  }
  at::Tensor host = host_alias(self);
  at::_index_put_impl_(host, host_indices, values.cpu(), accumulate, unsafe);
  return self;
}

} // namespace

void register_index_put() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("_index_put_impl_", TORCH_FN(index_put_impl_));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
