// Automatic mixed precision: the AutocastPrivateUse1 dispatch key. Inside
// torch.autocast("openreg"), each operator below first casts its floating-point tensor
// arguments by a policy, then redispatches; every other operator passes through unchanged.

#include "OpenReg.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: banned
// Unsafe in float16: the gradient of log(1 - p) overflows when p comes from a sigmoid.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast. Combine the sigmoid before them with the loss: use "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
              "which are safe to autocast.");
}
// ANCHOR_END: banned

} // namespace

// ANCHOR: register_autocast
void register_autocast() {
  // Every operator without a policy: fall through to the next dispatch key.
  static torch::Library all(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1,
                            __FILE__, __LINE__);
  // The KERNEL_PRIVATEUSEONE macros register on a library named `m`.
  static torch::Library m(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1,
                          __FILE__, __LINE__);
  static bool registered = [] {
    all.fallback(torch::CppFunction::makeFallthrough());

    // Lower precision (the autocast dtype): matrix products, where float16/bfloat16 pay off.
    KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(mv, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(addmv, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
    KERNEL_PRIVATEUSEONE(prelu, lower_precision_fp)

    // float32: operators whose range or precision float16 cannot hold.
    KERNEL_PRIVATEUSEONE(asin, fp32)
    KERNEL_PRIVATEUSEONE(acos, fp32)
    KERNEL_PRIVATEUSEONE(exp, fp32)
    KERNEL_PRIVATEUSEONE(expm1, fp32)
    KERNEL_PRIVATEUSEONE(log, fp32)
    KERNEL_PRIVATEUSEONE(log1p, fp32)
    KERNEL_PRIVATEUSEONE(reciprocal, fp32)
    KERNEL_PRIVATEUSEONE(rsqrt, fp32)
    KERNEL_PRIVATEUSEONE(pow, Tensor_Scalar, fp32)
    KERNEL_PRIVATEUSEONE(pow, Tensor_Tensor, fp32)
    KERNEL_PRIVATEUSEONE(softplus, fp32)
    KERNEL_PRIVATEUSEONE(layer_norm, fp32)
    KERNEL_PRIVATEUSEONE(group_norm, fp32)
    KERNEL_PRIVATEUSEONE(nll_loss, fp32)
    KERNEL_PRIVATEUSEONE(mse_loss, fp32)
    KERNEL_PRIVATEUSEONE(l1_loss, fp32)
    KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
    KERNEL_PRIVATEUSEONE(kl_div, fp32)
    KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)
    KERNEL_PRIVATEUSEONE(cosine_similarity, fp32)

    // The widest input type: operators that mix their inputs elementwise.
    KERNEL_PRIVATEUSEONE(addcdiv, promote)
    KERNEL_PRIVATEUSEONE(addcmul, promote)
    KERNEL_PRIVATEUSEONE(cat, promote)
    KERNEL_PRIVATEUSEONE(stack, promote)

    // Banned: an error that names the safe alternative.
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
    return true;
  }();
  (void)registered;
}
// ANCHOR_END: register_autocast

} // namespace openreg
