// Automatic mixed precision: inside torch.autocast("openreg"), the operators listed here cast
// their floating-point arguments by a policy and redispatch; all others fall through.

#include "OpenReg.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy is unsafe to autocast; use "
              "torch.nn.functional.binary_cross_entropy_with_logits, which is safe");
}

} // namespace

// ANCHOR: register_autocast
void register_autocast() {
  static torch::Library all(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1,
                            __FILE__, __LINE__);
  static torch::Library m(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1,
                          __FILE__, __LINE__);  // the KERNEL_PRIVATEUSEONE macros use `m`
  static bool registered = [] {
    all.fallback(torch::CppFunction::makeFallthrough());
    // Lower precision: matrix products.
    KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
    // float32: range or precision the lower dtypes lack.
    KERNEL_PRIVATEUSEONE(asin, fp32)
    KERNEL_PRIVATEUSEONE(exp, fp32)
    KERNEL_PRIVATEUSEONE(log, fp32)
    KERNEL_PRIVATEUSEONE(pow, Tensor_Scalar, fp32)
    KERNEL_PRIVATEUSEONE(mse_loss, fp32)
    KERNEL_PRIVATEUSEONE(nll_loss, fp32)
    // Banned.
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_autocast

} // namespace openreg
