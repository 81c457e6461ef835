// Reflection and replication padding, 1-D to 3-D, and their backwards. A padded output element
// copies one input element, so the forward is a gather and the backward a scatter-add, both by
// element offsets computed on the host from the sizes alone (no device values are read): the
// gather is the byte-gather kernel index_select uses, the scatter-add index_put's accumulating
// kernel. Most of these operators are structured (their meta functions check and size as on
// CPU); reflection_pad2d and the 2-D/3-D replication backwards are not, and take CPU's shared
// checks (ATen/native/Padding.h).

#include "operators/Structured.h"

#include <ATen/native/Padding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/reflection_pad1d_backward_meta.h>
#include <ATen/ops/reflection_pad1d_meta.h>
#include <ATen/ops/reflection_pad2d.h>
#include <ATen/ops/reflection_pad2d_backward.h>
#include <ATen/ops/reflection_pad3d_backward_meta.h>
#include <ATen/ops/reflection_pad3d_meta.h>
#include <ATen/ops/replication_pad1d_backward_meta.h>
#include <ATen/ops/replication_pad1d_meta.h>
#include <ATen/ops/replication_pad2d_backward.h>
#include <ATen/ops/replication_pad2d_meta.h>
#include <ATen/ops/replication_pad3d_backward.h>
#include <ATen/ops/replication_pad3d_meta.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace openreg {
namespace {

enum class Mode { Reflect, Replicate };

// ANCHOR: sources
// For every element of the padded output, in row-major order, the offset of the input element
// it copies in the contiguous input. `padding` pairs run from the last dimension inwards, as in
// torch.nn.functional.pad; a negative pad crops.
std::vector<int64_t> sources(at::IntArrayRef input, at::IntArrayRef padding, Mode mode) {
  const int64_t dims = static_cast<int64_t>(padding.size()) / 2, ndim = input.size();
  // Per padded dimension (outermost first): each output position's input position.
  std::vector<std::vector<int64_t>> maps(dims);
  int64_t planes = 1, volume = 1, count = 1;
  for (int64_t d = 0; d < ndim - dims; ++d) {
    planes *= input[d];
  }
  for (int64_t k = 0; k < dims; ++k) {
    const int64_t size = input[ndim - dims + k];
    const int64_t before = padding[2 * (dims - 1 - k)], after = padding[2 * (dims - 1 - k) + 1];
    for (int64_t o = 0; o < size + before + after; ++o) {
      int64_t i = o - before;
      if (mode == Mode::Reflect) {
        i = i < 0 ? -i : (i >= size ? 2 * (size - 1) - i : i);
      } else {
        i = std::clamp<int64_t>(i, 0, size - 1);
      }
      maps[k].push_back(i);
    }
    volume *= size;
    count *= maps[k].size();
  }
  // The contiguous input's strides along the padded dimensions.
  std::vector<int64_t> strides(dims, 1);
  for (int64_t k = dims - 2; k >= 0; --k) {
    strides[k] = strides[k + 1] * input[ndim - dims + k + 1];
  }
  std::vector<int64_t> out;
  out.reserve(planes * count);
  std::vector<int64_t> position(dims, 0);
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t n = 0; n < count; ++n) {
      int64_t offset = plane * volume;
      for (int64_t k = 0; k < dims; ++k) {
        offset += maps[k][position[k]] * strides[k];
      }
      out.push_back(offset);
      for (int64_t k = dims - 1; k >= 0 && ++position[k] == static_cast<int64_t>(maps[k].size()); --k) {
        position[k] = 0;
      }
    }
  }
  return out;
}
// ANCHOR_END: sources

// out = the padded input (gather by offset).
void pad_into(const at::Tensor& self, at::IntArrayRef padding, Mode mode, const at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const at::Tensor src = self.contiguous();
  const std::vector<int64_t> offsets = sources(self.sizes(), padding, mode);
  const at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  call([&] {
    gather_rows(dense(src), dense(target), self.element_size(), {offsets.data(), offsets.size()},
                 /*outer=*/1, /*size=*/static_cast<size_t>(src.numel()), /*inner=*/1,
                 self.device().index());
  });
  if (!target.is_same(out)) {
    out.copy_(target);
  }
}

// grad_input = the sum, per input element, of the gradients of the outputs that copy it.
void pad_backward_into(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                       at::IntArrayRef padding, Mode mode, const at::Tensor& grad_input) {
  at::Tensor sum = at::zeros(self.sizes(), grad_output.options());
  const at::Tensor grad = grad_output.contiguous();
  const std::vector<int64_t> offsets = sources(self.sizes(), padding, mode);
  bool ours = grad.numel() == 0;
  if (!ours) {
    ours = call([&] {
      return launch_index_put(dense(sum), {offsets.data(), offsets.size()}, dense(grad),
                              /*accumulate=*/true, self.device().index());
    });
  }
  if (!ours) {  // a dtype the accumulating kernel lacks: the same sums on the host
    on_host(name, grad.scalar_type(), [&] {
      at::Tensor index = at::empty({static_cast<int64_t>(offsets.size())}, at::kLong);
      std::copy(offsets.begin(), offsets.end(), index.mutable_data_ptr<int64_t>());
      host_alias(sum).view(-1).index_add_(0, index, host_alias(grad).view(-1));
    });
  }
  grad_input.copy_(sum);
}

template <class Meta, Mode mode, Variant kind>
at::Tensor pad(const at::Tensor& self, at::IntArrayRef padding, const at::Tensor& given = {}) {
  check_devices("pad", {{"self", &self}, {"out", &given}});  // CPU's wrappers name no operator
  Structured<Meta, kind> s(given);
  s.meta(self, padding);
  pad_into(self, padding, mode, s.maybe_get_output(0));
  return s.result();
}

template <class Meta, Mode mode, Variant kind>
at::Tensor pad_backward(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                        at::IntArrayRef padding, const at::Tensor& given = {}) {
  check_devices(name, {{"grad_output", &grad_output}, {"self", &self}, {"grad_input", &given}});
  Structured<Meta, kind> s(given);
  s.meta(grad_output, self, padding);
  pad_backward_into(name, grad_output, self, padding, mode, s.maybe_get_output(0));
  return s.result();
}

// The unstructured ones: CPU's shared checks, then the same kernels.
at::Tensor reflection_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  const auto sizes = at::native::padding::pad_shape_check(self, padding, 2, /*is_reflection=*/true);
  at::Tensor out = at::empty(sizes, self.options().memory_format(self.suggest_memory_format()));
  pad_into(self, padding, Mode::Reflect, out);
  return out;
}

template <Mode mode, int64_t dims>
at::Tensor unstructured_pad_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                     at::IntArrayRef padding) {
  const char* name = mode == Mode::Reflect ? "reflection_pad2d_backward"
                     : dims == 2          ? "replication_pad2d_backward"
                                          : "replication_pad3d_backward";
  check_devices(name, {{"grad_output", &grad_output}, {"self", &self}});
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * dims, "padding size is expected to be ",
              2 * dims, ", but got: ", padding.size());
  TORCH_CHECK(grad_output.dim() == self.dim(), "grad_output must have ", self.dim(),
              " dimensions, but got ", grad_output.dim());
  at::native::padding::pad_backward_shape_check(grad_output, self, padding, dims);
  at::Tensor grad_input = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  pad_backward_into(name, grad_output, self, padding, mode, grad_input);
  return grad_input;
}

// The operator's variants, as registered.
#define OPENREG_PAD(name, Meta, mode)                                                        \
  at::Tensor name##_functional(const at::Tensor& self, at::IntArrayRef padding) {          \
    return pad<Meta, mode, Variant::Functional>(self, padding);                            \
  }                                                                                        \
  at::Tensor& name##_out(const at::Tensor& self, at::IntArrayRef padding, at::Tensor& out) { \
    pad<Meta, mode, Variant::Out>(self, padding, out);                                     \
    return out;                                                                            \
  }
#define OPENREG_PAD_BACKWARD(name, Meta, mode)                                               \
  at::Tensor name##_functional(const at::Tensor& g, const at::Tensor& self,                \
                               at::IntArrayRef padding) {                                  \
    return pad_backward<Meta, mode, Variant::Functional>(#name, g, self, padding);         \
  }                                                                                        \
  at::Tensor& name##_out(const at::Tensor& g, const at::Tensor& self, at::IntArrayRef padding, \
                         at::Tensor& out) {                                                \
    pad_backward<Meta, mode, Variant::Out>(#name, g, self, padding, out);                  \
    return out;                                                                            \
  }
OPENREG_PAD(reflection_pad1d, at::meta::structured_reflection_pad1d, Mode::Reflect)
OPENREG_PAD(reflection_pad3d, at::meta::structured_reflection_pad3d, Mode::Reflect)
OPENREG_PAD(replication_pad1d, at::meta::structured_replication_pad1d, Mode::Replicate)
OPENREG_PAD(replication_pad2d, at::meta::structured_replication_pad2d, Mode::Replicate)
OPENREG_PAD(replication_pad3d, at::meta::structured_replication_pad3d, Mode::Replicate)
OPENREG_PAD_BACKWARD(reflection_pad1d_backward, at::meta::structured_reflection_pad1d_backward, Mode::Reflect)
OPENREG_PAD_BACKWARD(reflection_pad3d_backward, at::meta::structured_reflection_pad3d_backward, Mode::Reflect)
OPENREG_PAD_BACKWARD(replication_pad1d_backward, at::meta::structured_replication_pad1d_backward, Mode::Replicate)
#undef OPENREG_PAD
#undef OPENREG_PAD_BACKWARD

} // namespace

void register_padding() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
#define OPENREG_IMPL(name, out_overload)                                  \
  library.impl(#name, TORCH_FN(name##_functional));                      \
  library.impl(#name "." out_overload, TORCH_FN(name##_out));
    OPENREG_IMPL(reflection_pad1d, "out")
    OPENREG_IMPL(reflection_pad3d, "out")
    OPENREG_IMPL(replication_pad1d, "out")
    OPENREG_IMPL(replication_pad2d, "out")
    OPENREG_IMPL(replication_pad3d, "out")
    OPENREG_IMPL(reflection_pad1d_backward, "grad_input")
    OPENREG_IMPL(reflection_pad3d_backward, "grad_input")
    OPENREG_IMPL(replication_pad1d_backward, "grad_input")
#undef OPENREG_IMPL
    library.impl("reflection_pad2d", TORCH_FN(reflection_pad2d));
    library.impl("reflection_pad2d_backward", TORCH_FN((unstructured_pad_backward<Mode::Reflect, 2>)));
    library.impl("replication_pad2d_backward", TORCH_FN((unstructured_pad_backward<Mode::Replicate, 2>)));
    library.impl("replication_pad3d_backward", TORCH_FN((unstructured_pad_backward<Mode::Replicate, 3>)));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
