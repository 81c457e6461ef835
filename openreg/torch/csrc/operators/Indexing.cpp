// Advanced indexing: `x[idx]` (index) and `x[idx] = v`, `x[rows, cols] += v` (index_put_ with
// accumulate): integer index tensors, or bool masks (their true positions), broadcast together,
// with CPU's rules for where the indexed dimensions land in the result. With integer indices
// both directions run on the stream: a Rust kernel reads the index values and the elements
// (kernels/advanced_indexing.rs); index_add (`out[..., index[i], ...] += alpha * source[..., i,
// ...]`) is the same accumulating write. Masks read their true positions on the host (they
// decide the shape) and turn them into element offsets, which a Rust kernel then reads (the
// gather index_select uses) or writes (kernels/indexing.rs) on the stream; masked_scatter_
// (masked_select's backward) is the same plain write at the mask's true elements.

#include "operators/Structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/_index_put_impl.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <limits>
#include <vector>

namespace openreg {
namespace {

// ANCHOR: offsets
// The element offset (from self's first element) of every element of the indexing result, in
// the result's row-major order. `dims`: the indexed dimensions; `index`: their broadcast index
// tensors, as int64 on the host.
// Where each dimension of the result comes from: a broadcast-index dimension (-1 - j) or a
// dimension of self (d). CPU's rule: indexed dimensions that are adjacent put the index
// dimensions where they were; apart, the index dimensions come first.
std::vector<int64_t> result_sources(const at::Tensor& self, const std::vector<int64_t>& dims, size_t index_rank) {
  bool adjacent = true;
  for (size_t k = 1; k < dims.size(); ++k) {
    adjacent = adjacent && dims[k] == dims[k - 1] + 1;
  }
  std::vector<int64_t> source;
  const auto indexed = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  const int64_t first = adjacent ? dims.front() : 0;
  for (int64_t d = 0; d < first; ++d) {
    source.push_back(d);
  }
  for (size_t j = 0; j < index_rank; ++j) {
    source.push_back(-1 - static_cast<int64_t>(j));
  }
  for (int64_t d = first; d < self.dim(); ++d) {
    if (!indexed(d)) {
      source.push_back(d);
    }
  }
  return source;
}

std::vector<int64_t> offsets(const at::Tensor& self, const std::vector<int64_t>& dims,
                             const std::vector<at::Tensor>& index, std::vector<int64_t>& result_shape) {
  const auto broadcast = index[0].sizes();
  const std::vector<int64_t> source = result_sources(self, dims, broadcast.size());
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

// ANCHOR: index
// The indexed dimensions and their index tensors (int64, on the host), from `x[...]`'s list:
// None skips a dimension, a bool mask stands for the positions of its true elements over as
// many dimensions as it has. CPU's checks and messages.
// CPU's checks of the index list, with its messages: count, device and dtype of each.
void check_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    if (t.has_value() && t->defined()) {
      TORCH_CHECK_INDEX(t->is_cpu() || t->device() == self.device(), "indices should be either on cpu or on the same "
                        "device as the indexed tensor (", self.device(), ")");
      const auto type = t->scalar_type();
      TORCH_CHECK_INDEX(type == at::kLong || type == at::kInt || type == at::kByte || type == at::kBool,
                        "tensors used as indices must be long, int, byte or bool tensors");
    }
  }
}

void host_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                  std::vector<int64_t>& dims, std::vector<at::Tensor>& index) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  int64_t d = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    if (!t.has_value() || !t->defined()) {
      ++d;
      continue;
    }
    TORCH_CHECK_INDEX(t->is_cpu() || t->device() == self.device(), "indices should be either on cpu or on the same "
                      "device as the indexed tensor (", self.device(), ")");
    const auto type = t->scalar_type();
    TORCH_CHECK_INDEX(type == at::kLong || type == at::kInt || type == at::kByte || type == at::kBool,
                      "tensors used as indices must be long, int, byte or bool tensors");
    if (type == at::kByte || type == at::kBool) {
      for (int64_t j = 0; j < t->dim(); ++j) {
        TORCH_CHECK_INDEX(d + j < self.dim() && t->size(j) == self.size(d + j), "The shape of the mask ",
                          t->sizes(), " at index ", j, " does not match the shape of the indexed tensor ",
                          self.sizes(), " at index ", d + j);
      }
      const at::Tensor positions = t->to(at::kCPU).nonzero();  // waits for the device: the values decide
      for (int64_t j = 0; j < t->dim(); ++j) {
        dims.push_back(d + j);
        index.push_back(positions.select(1, j).contiguous());
      }
      d += t->dim();
    } else {
      dims.push_back(d++);
      index.push_back(t->to(at::kCPU, at::kLong).contiguous());
    }
  }
}

// The index tensors broadcast to one shape (views), with CPU's error when they cannot be.
std::vector<at::Tensor> broadcast_together(const std::vector<at::Tensor>& index) {
  try {
    return at::expand_outplace(index);
  } catch (const std::exception&) {
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together");
  }
}

// x[i0, i1, ...] with integer index tensors: the result's layout follows from the shapes, and
// the kernel reads the index values on the stream (kernels/advanced_indexing.rs), so nothing
// waits for the device; an index out of range is an IndexError at the stream's next
// synchronize, as a GPU's device-side assert. Bool and byte masks are not: their true
// positions are data, read on the host as CUDA reads them.
struct DeviceIndices {
  std::vector<int64_t> dims;      // the dimensions the index tensors address
  std::vector<at::Tensor> index;  // int64, on the device, broadcast together, contiguous
};

// False, having done nothing, if an index is a mask or there is none.
bool device_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, DeviceIndices& out) {
  std::vector<at::Tensor> given;
  int64_t d = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    if (!t.has_value() || !t->defined()) {
      ++d;
      continue;
    }
    if (t->scalar_type() == at::kByte || t->scalar_type() == at::kBool) {
      return false;
    }
    out.dims.push_back(d++);
    given.push_back(*t);
  }
  if (given.empty()) {
    return false;
  }
  for (const auto& t : broadcast_together(given)) {
    out.index.push_back(t.to(self.device(), at::kLong).contiguous());  // a CPU index is copied to the device
  }
  return true;
}

// The layout the kernel walks, over `operand`'s strides; `shape` is the result's.
IndexLayout index_layout(const at::Tensor& operand, const DeviceIndices& indices, std::vector<int64_t>& shape) {
  const auto broadcast = indices.index[0].sizes();
  std::vector<int64_t> flat_stride(broadcast.size(), 1);  // row-major strides of the index shape
  for (int64_t j = static_cast<int64_t>(broadcast.size()) - 2; j >= 0; --j) {
    flat_stride[j] = flat_stride[j + 1] * broadcast[j + 1];
  }
  IndexLayout layout;
  shape.clear();
  for (int64_t s : result_sources(operand, indices.dims, broadcast.size())) {
    shape.push_back(s >= 0 ? operand.size(s) : broadcast[-1 - s]);
    layout.shape.push_back(shape.back());
    layout.source_strides.push_back(s >= 0 ? operand.stride(s) : 0);
    layout.index_strides.push_back(s >= 0 ? 0 : flat_stride[-1 - s]);
  }
  if (shape.empty()) {  // 0-dim indices into a 1-D tensor: a 0-dim result, one element
    layout.shape.push_back(1);
    layout.source_strides.push_back(0);
    layout.index_strides.push_back(0);
  }
  for (int64_t dim : indices.dims) {
    layout.dims.push_back(dim);
    layout.dim_sizes.push_back(operand.size(dim));
    layout.dim_strides.push_back(operand.stride(dim));
  }
  return layout;
}

std::vector<Dense> dense_all(const std::vector<at::Tensor>& tensors) {
  std::vector<Dense> slots;
  for (const auto& t : tensors) {
    slots.push_back(dense(t));
  }
  return slots;
}

// ANCHOR: device_index
bool device_index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  DeviceIndices index;
  if (!device_indices(self, indices, index)) {
    return false;
  }
  const at::Tensor source = self.contiguous();
  std::vector<int64_t> shape;
  const IndexLayout layout = index_layout(source, index, shape);
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::native::resize_output(out, shape);
  const at::Tensor dst = out.is_contiguous() ? out : at::empty(shape, out.options());
  const std::vector<Dense> slots = dense_all(index.index);
  call([&] {
    launch_index(dense(source), dense(dst), self.element_size(), layout, {slots.data(), slots.size()},
                 self.device().index());
  });
  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
  return true;
}
// ANCHOR_END: device_index

// ANCHOR: device_index_write
// x[i0, i1, ...] = values (`+=` with accumulate; index_add_ is one too): the same layout,
// over the target's own strides, with every index checked on the stream before anything is
// written. False, having done nothing, for masks, a target that overlaps itself, and a dtype
// the kernel has no sum for.
bool device_index_write(IndexWrite op, const at::Tensor& self, const DeviceIndices& index, const at::Tensor& values) {
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {  // an expanded target
    return false;
  }
  // A non-dense target (a strided slice) is written through a dense copy.
  const at::Tensor target = self.is_non_overlapping_and_dense() ? self : self.contiguous();
  std::vector<int64_t> shape;
  const IndexLayout layout = index_layout(target, index, shape);
  TORCH_CHECK(at::is_expandable_to(values.sizes(), shape), "shape mismatch: value tensor of shape ", values.sizes(),
              " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(shape));
  const at::Tensor v = values.expand(shape).contiguous();
  const std::vector<Dense> slots = dense_all(index.index);
  const bool done = call([&] {
    return launch_index_write(op, dense(target), dense(v), self.element_size(), layout, {slots.data(), slots.size()},
                              self.device().index());
  });
  if (done && !target.is_same(self)) {
    self.copy_(target);
  }
  return done;
}
// ANCHOR_END: device_index_write

at::Tensor& index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  check_devices("index.Tensor_out", {{"self", &self}, {"out", &out}});
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "index_out: self (", self.scalar_type(),
              ") and result (", out.scalar_type(), ") must have the same scalar type");
  check_indices(self, indices);
  if (device_index(self, indices, out)) {
    return out;
  }
  std::vector<int64_t> dims;
  std::vector<at::Tensor> index;
  host_indices(self, indices, dims, index);
  // Offsets into a contiguous source: the gather kernel index_select uses reads it.
  const at::Tensor source = self.contiguous();
  std::vector<int64_t> shape;
  std::vector<int64_t> where;
  if (index.empty()) {
    shape.assign(self.sizes().begin(), self.sizes().end());  // x[None...]: every element, a copy
  } else {
    std::vector<at::Tensor> expanded = broadcast_together(index);
    for (auto& t : expanded) {
      t = t.contiguous();
    }
    where = offsets(source, dims, expanded, shape);
  }
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::native::resize_output(out, shape);
  if (index.empty()) {
    return out.copy_(self);
  }
  const at::Tensor dst = out.is_contiguous() ? out : at::empty(shape, out.options());
  call([&] {
    gather_rows(dense(source), dense(dst), self.element_size(), {where.data(), where.size()}, /*outer=*/1,
                 static_cast<size_t>(source.numel()), /*inner=*/1, self.device().index());
  });
  if (!dst.is_same(out)) {
    out.copy_(dst);
  }
  return out;
}

at::Tensor index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  at::Tensor out = at::empty({0}, self.options());
  return index_out(self, indices, out);
}
// ANCHOR_END: index

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& given_values, bool accumulate, bool unsafe) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  // CPU's and CUDA's rules (_index_put_impl_, make_info): a 0-dim value may come from the CPU,
  // indices from the CPU or self's device, anything else from self's device; and no operand
  // may overlap self.
  const at::Tensor values = given_values.device() != self.device() && given_values.dim() == 0
                                ? given_values.to(self.device()) : given_values;
  check_devices("index_put_", {{"self", &self}, {"values", &values}});
  at::assert_no_overlap(self, values);
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor> t = indices.get(d);
    if (t.has_value() && t->defined()) {
      TORCH_CHECK_INDEX(t->is_cpu() || t->device() == self.device(), "indices should be either on cpu or on the "
                        "same device as the indexed tensor (", self.device(), ")");
      at::assert_no_overlap(self, *t);
    }
  }
  check_indices(self, indices);
  DeviceIndices on_device;
  if (values.scalar_type() == self.scalar_type() && device_indices(self, indices, on_device) &&
      device_index_write(accumulate ? IndexWrite::Accumulate : IndexWrite::Assign, self, on_device, values)) {
    return self;
  }
  std::vector<int64_t> dims;
  std::vector<at::Tensor> index;
  host_indices(self, indices, dims, index);
  // A dtype mismatch is CPU's error, raised by its kernel.
  if (values.scalar_type() == self.scalar_type() && !index.empty()) {
    std::vector<at::Tensor> expanded = broadcast_together(index);
    for (auto& t : expanded) {
      t = t.contiguous();
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
  on_host("index_put_", self.scalar_type(), [&] {
    c10::List<std::optional<at::Tensor>> host_indices;
    for (size_t d = 0; d < indices.size(); ++d) {
      const std::optional<at::Tensor> t = indices.get(d);
      host_indices.push_back(t.has_value() && t->defined() ? std::optional<at::Tensor>(t->cpu()) : std::nullopt);
    }
    at::Tensor host = host_alias(self);
    at::_index_put_impl_(host, host_indices, values.cpu(), accumulate, unsafe);
  });
  return self;
}

// ANCHOR: index_add
template <Variant kind>
at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                     const at::Tensor& source, const at::Scalar& alpha, const at::Tensor& given = {}) {
  check_devices("index_add", {{"self", &self}, {"index", &index}, {"source", &source}, {"out", &given}});
  Structured<at::meta::structured_index_add, kind> s(kind == Variant::InPlace ? self : given);
  dim = s.meta(self, dim, index, source, alpha).dim;
  const at::Tensor& out = s.maybe_get_output(0);
  // CPU adds slice by slice with a TensorIterator, which refuses a source that partly
  // overlaps the result.
  check_overlap(out, {&source});
  at::assert_no_overlap(out, index);
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() == 0 || source.numel() == 0) {
    return s.result();
  }
  // index_put_ with accumulate along `dim`: (None,) * dim + (index,), the index values read
  // on the stream. A 0-dim result is the 1-element tensor it views.
  DeviceIndices along;
  along.dims.push_back(out.dim() == 0 ? 0 : dim);
  along.index.push_back(index.to(at::kLong).reshape({-1}).contiguous());
  const at::Tensor target = out.dim() == 0 ? out.view({1}) : out;
  const at::Tensor scaled = alpha.equal(1) ? source : source.mul(alpha);
  if (!device_index_write(IndexWrite::IndexAdd, target, along, out.dim() == 0 ? scaled.view({1}) : scaled)) {
    on_host("index_add", out.scalar_type(), [&] {
      host_alias(out).index_add_(dim, host_alias(index), host_alias(source), alpha);
    });
  }
  return s.result();
}
// ANCHOR_END: index_add

at::Tensor index_add_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& source, const at::Scalar& alpha) {
  return index_add<Variant::Functional>(self, dim, index, source, alpha);
}
at::Tensor& index_add_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& source, const at::Scalar& alpha) {
  index_add<Variant::InPlace>(self, dim, index, source, alpha);
  return self;
}
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const at::Scalar& alpha, at::Tensor& out) {
  index_add<Variant::Out>(self, dim, index, source, alpha, out);
  return out;
}

at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  check_devices("masked_scatter_", {{"self", &self}, {"mask", &mask}, {"source", &source}});
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "masked_scatter: expected self and source to have same dtypes but got",
              self.scalar_type(), " and ", source.scalar_type());
  const at::Tensor where = mask.expand(self.sizes());
  const at::Tensor host_mask = host_alias(where.contiguous());  // waits for the device
  const bool* chosen = host_mask.const_data_ptr<bool>();
  const int64_t ndim = self.dim();
  std::vector<int64_t> coord(ndim, 0), offsets;
  for (int64_t n = 0; n < host_mask.numel(); ++n) {
    if (chosen[n]) {
      int64_t offset = 0;
      for (int64_t d = 0; d < ndim; ++d) {
        offset += coord[d] * self.stride(d);
      }
      offsets.push_back(offset);
    }
    for (int64_t d = ndim - 1; d >= 0 && ++coord[d] == self.size(d); --d) {
      coord[d] = 0;
    }
  }
  const int64_t count = static_cast<int64_t>(offsets.size());
  TORCH_CHECK(source.numel() >= count, "Number of elements of source < number of ones in mask");
  if (count == 0) {
    return self;
  }
  const at::Tensor values = source.contiguous().view(-1).narrow(0, 0, count);
  const bool done = call([&] {
    return launch_index_put(dense(self), {offsets.data(), offsets.size()}, dense(values),
                            /*accumulate=*/false, self.device().index());
  });
  if (!done) {
    on_host("masked_scatter_", self.scalar_type(), [&] {
      host_alias(self).masked_scatter_(host_mask, host_alias(source));
    });
  }
  return self;
}

// ANCHOR: nonzero
// nonzero's output size is the number of true elements, which only the values tell: the count
// is a device reduction copied to the host (which waits for the stream, as CUDA's nonzero
// does), and then the kernel writes the coordinates on the stream.
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  check_devices("nonzero.out", {{"self", &self}, {"out", &out}});
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long "
              "but got scalar type", out.scalar_type());
  TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(), "nonzero is not supported for tensors "
              "with more than INT_MAX elements, but got input of size ", self.numel());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  const at::Tensor mask = self.ne(0).contiguous();  // bool, on the device
  const int64_t count = self.numel() == 0 ? 0 : mask.sum().item<int64_t>();
  at::native::resize_output(out, {count, self.dim()});
  const at::Tensor coordinates = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  call([&] {
    launch_nonzero(dense(mask), {self.sizes().data(), self.sizes().size()}, dense(coordinates), count,
                   self.device().index());
  });
  if (!coordinates.is_same(out)) {
    out.copy_(coordinates);
  }
  return out;
}

at::Tensor nonzero(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}
// ANCHOR_END: nonzero

} // namespace

// ANCHOR: index_fill
// index_fill_: `value` written at positions `index` of dimension `dim`: index_put_ with one
// index tensor at that dimension, so negative indices count from the end and an index out of
// range is CPU's IndexError.
at::Tensor& index_fill_tensor_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Tensor& value) {
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
  TORCH_CHECK(value.dim() == 0,
              "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  check_devices("index_fill_", {{"self", &self}, {"index", &index}});
  at::Tensor target = self.dim() == 0 ? self.view({1}) : self;
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  c10::List<std::optional<at::Tensor>> indices;
  for (int64_t k = 0; k < d; ++k) {
    indices.push_back(std::nullopt);
  }
  indices.push_back(index.reshape({-1}));
  target.index_put_(indices, value.to(self.device(), self.scalar_type()));
  return self;
}

at::Tensor& index_fill_scalar_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                               const at::Scalar& value) {
  return index_fill_tensor_(self, dim, index, at::scalar_tensor(value, self.options().device(at::kCPU)));
}
// ANCHOR_END: index_fill

void register_indexing() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("index.Tensor", TORCH_FN(index));
    library.impl("index.Tensor_out", TORCH_FN(index_out));
    library.impl("_index_put_impl_", TORCH_FN(index_put_impl_));
    library.impl("index_add", TORCH_FN(index_add_functional));
    library.impl("index_add_", TORCH_FN(index_add_inplace));
    library.impl("index_add.out", TORCH_FN(index_add_out));
    library.impl("masked_scatter_", TORCH_FN(masked_scatter_));
    library.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor_));
    library.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_scalar_));
    library.impl("nonzero", TORCH_FN(nonzero));
    library.impl("nonzero.out", TORCH_FN(nonzero_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
