// isin as CPU computes it for a small set of test elements (isin_default_kernel_cpu in
// aten/src/ATen/native/TensorCompare.cpp): every element compared with every test element,
// then any() over the test elements. Built from the device's own eq and any, so it runs where
// they run; the structured meta function checks the dtypes and sizes the bool output.

#include "operators/Structured.h"

#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isin.h>
#include <ATen/ops/isin_meta.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace openreg {
namespace {

// The comparison holds elements x test values at once; larger problems are CPU's (sorting).
constexpr int64_t kMaxPairs = int64_t{1} << 24;

template <Variant kind>
at::Tensor isin(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert,
                const at::Tensor& given = {}) {
  Structured<at::meta::structured_isin_Tensor_Tensor, kind> s(given);
  s.meta(elements, test, assume_unique, invert);
  const at::Tensor& result = s.maybe_get_output(0);
  if (elements.numel() * test.numel() > kMaxPairs) {
    on_host("isin", elements.scalar_type(), [&] {
      at::Tensor host = host_alias(result);
      at::isin_out(host, host_alias(elements), host_alias(test), assume_unique, invert);
    });
  } else if (result.numel() > 0) {
    at::Tensor found = test.numel() == 0 ? at::zeros(elements.sizes(), result.options())
                                         : at::eq(elements.unsqueeze(-1), test.reshape({-1})).any(-1);
    result.copy_(invert ? at::logical_not(found) : found);
  }
  return s.result();
}

at::Tensor isin_functional(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert) {
  return isin<Variant::Functional>(elements, test, assume_unique, invert);
}

at::Tensor& isin_out(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert,
                     at::Tensor& out) {
  isin<Variant::Out>(elements, test, assume_unique, invert, out);
  return out;
}

} // namespace

void register_tensor_compare() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("isin.Tensor_Tensor", TORCH_FN(isin_functional));
    library.impl("isin.Tensor_Tensor_out", TORCH_FN(isin_out));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
