// tril and triu: the structured meta function checks the input (two dimensions at least) and
// sizes the output; the Rust kernel copies each matrix with the elements outside the triangle
// zeroed, for every dtype (it moves bytes). Models build causal masks with tril in every step.

#include "operators/Structured.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

namespace openreg {
namespace {

// out = the triangle of self, on contiguous copies when either is strided.
void triangle(const at::Tensor& self, const at::Tensor& out, int64_t diagonal, bool upper) {
  if (out.numel() == 0) {
    return;
  }
  const at::Tensor input = self.contiguous();
  const at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  const bool done = call([&] {
    return launch_triangle(dense(input), dense(target), self.size(-2), self.size(-1), diagonal, upper,
                           self.device().index());
  });
  if (!done) {
    on_host(upper ? "triu" : "tril", self.scalar_type(), [&] {
      const at::Tensor host = host_alias(input);
      host_alias(target).copy_(upper ? host.triu(diagonal) : host.tril(diagonal));
    });
  }
  if (!target.is_same(out)) {
    out.copy_(target);
  }
}

template <class Meta, Variant kind>
at::Tensor run(const at::Tensor& self, int64_t diagonal, const at::Tensor& given = {}) {
  Structured<Meta, kind> s(given);
  s.meta(self, diagonal);
  triangle(self, s.maybe_get_output(0), diagonal, std::is_same_v<Meta, at::meta::structured_triu>);
  return s.result();
}

using Tril = at::meta::structured_tril;
using Triu = at::meta::structured_triu;

at::Tensor tril(const at::Tensor& self, int64_t diagonal) {
  return run<Tril, Variant::Functional>(self, diagonal);
}
at::Tensor& tril_(at::Tensor& self, int64_t diagonal) {
  run<Tril, Variant::InPlace>(self, diagonal, self);
  return self;
}
at::Tensor& tril_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  run<Tril, Variant::Out>(self, diagonal, out);
  return out;
}
at::Tensor triu(const at::Tensor& self, int64_t diagonal) {
  return run<Triu, Variant::Functional>(self, diagonal);
}
at::Tensor& triu_(at::Tensor& self, int64_t diagonal) {
  run<Triu, Variant::InPlace>(self, diagonal, self);
  return self;
}
at::Tensor& triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  run<Triu, Variant::Out>(self, diagonal, out);
  return out;
}

} // namespace

void register_triangular_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("tril", TORCH_FN(tril));
    library.impl("tril_", TORCH_FN(tril_));
    library.impl("tril.out", TORCH_FN(tril_out));
    library.impl("triu", TORCH_FN(triu));
    library.impl("triu_", TORCH_FN(triu_));
    library.impl("triu.out", TORCH_FN(triu_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
