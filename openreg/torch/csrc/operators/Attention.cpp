// Scaled dot-product attention through PyTorch's "overrideable" backend slot: our
// _fused_sdp_choice picks it for the cases handled here (and MATH otherwise), and the
// forward and backward are composed of device operators (matrix products in gemm,
// elementwise in the Rust kernels), in float32 whatever the input dtype. Grouped-query
// attention (fewer key/value heads than query heads) reaches the overrideable kernel with the
// key and value as they are: each key/value head serves a run of consecutive query heads, so
// those query heads are stacked along the sequence and share one product, with no copy of K
// or V.

#include "operators/Structured.h"
#include "runtime/Generator.h"

#include <ATen/core/Tensor.h>
#include <limits>
#include <numeric>
#include <vector>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

namespace openreg {
namespace {

// SDPBackend's values (ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kMath = 0;
constexpr int64_t kOverrideable = 4;

// ANCHOR: choice
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const auto dtype = q.scalar_type();
  // Sizes are read as SymInts: under torch.export the batch (or the sequence) is a symbol, and
  // reading a fake tensor's sizes as integers would specialise the exported program to the
  // example's sizes. Comparing a symbol with itself adds no guard.
  auto same = [](const c10::SymInt& a, const c10::SymInt& b) {
    return a.sym_eq(b).guard_bool(__FILE__, __LINE__);
  };
  const bool shapes = q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
                      same(q.sym_size(0), k.sym_size(0)) && same(k.sym_size(1), v.sym_size(1));
  // Without enable_gqa the heads must match; with it, the query heads split evenly over the
  // key/value heads (otherwise the math path raises PyTorch's error).
  const bool heads = shapes && (same(q.sym_size(1), k.sym_size(1)) ||
                                (enable_gqa && k.sym_size(1) > 0 &&
                                 same(q.sym_size(1) % k.sym_size(1), c10::SymInt(0))));
  const bool handled = dropout_p >= 0.0 && dropout_p < 1.0 && heads && k.scalar_type() == dtype &&
                       v.scalar_type() == dtype &&
                       (dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16);
  return handled ? kOverrideable : kMath;
}
// ANCHOR_END: choice

// [B, H, L, X] as [B, heads, (H / heads) * L, X]: the query heads that share a key/value head
// stacked along the sequence (a view when H == heads).
at::Tensor grouped(const at::Tensor& t, int64_t heads) {
  return t.reshape({t.size(0), heads, t.size(1) / heads * t.size(2), t.size(3)});
}

// The inverse: [B, heads, g * L, X] back to [B, heads * g, L, X].
at::Tensor ungrouped(const at::Tensor& t, int64_t query_heads) {
  return t.reshape({t.size(0), query_heads, t.size(1) * t.size(2) / query_heads, t.size(3)});
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// Q K^T * scale, plus the mask (boolean: false means masked out) and the causal mask, in float32.
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& bias,
                  bool is_causal, double scale) {
  at::Tensor s = ungrouped(at::matmul(grouped(q.to(at::kFloat), k.size(1)), k.to(at::kFloat).transpose(-2, -1)),
                           q.size(1)).mul_(scale);
  const double inf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    const int64_t l = q.size(-2), n = k.size(-2);
    at::Tensor keep = at::ones({l, n}, q.options().dtype(at::kBool)).tril();
    s = at::where(keep, s, -inf);
  }
  if (bias && bias->defined()) {
    s = bias->scalar_type() == at::kBool ? at::where(*bias, s, -inf) : s.add(bias->to(at::kFloat));
  }
  return s;
}

// An empty output of `sizes` in the layout the operator's meta function gives it
// (`alloc_with_matching_layout` in torch/_meta_registrations.py): `like`'s strides when the sizes
// match (empty_like), else `like`'s dimension order. An exported or compiled graph plans its
// views from those strides, so a contiguous result would break them.
at::Tensor empty_in_layout_of(const at::Tensor& like, at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (like.sizes() == sizes) {
    return at::empty_like(like, options);
  }
  std::vector<int64_t> order(like.dim());
  std::iota(order.begin(), order.end(), 0);
  const auto key = [&](int64_t d) {
    return like.stride(d) != 0 ? like.stride(d) : std::numeric_limits<int64_t>::max();
  };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  std::vector<int64_t> strides(like.dim());
  int64_t stride = 1;
  for (int64_t d : order) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  return at::empty_strided(sizes, strides, options);
}

// `result` in the layout of empty_in_layout_of(query, ...): itself if it has it, else a copy.
at::Tensor with_layout_of(const at::Tensor& query, const at::Tensor& result) {
  at::Tensor laid_out = empty_in_layout_of(query, result.sizes(), result.options());
  return laid_out.strides() == result.strides() ? result : laid_out.copy_(result);
}

// ANCHOR: dropout
// P * mask / (1 - p) for contiguous float32 P, the mask drawn from Philox numbers at `seed`
// and `offset` (kept in `*mask` when asked): native_dropout's kernel, so the same seed and
// offset give the same mask.
at::Tensor dropped(const at::Tensor& p, uint64_t seed, uint64_t offset, double dropout_p,
                   at::Tensor* mask = nullptr) {
  at::Tensor out = at::empty(p.sizes(), p.options());
  at::Tensor bits = at::empty(p.sizes(), p.options().dtype(at::kBool));
  call([&] {
    return launch_dropout_at(seed, offset, 1.0 - dropout_p, 1.0 / (1.0 - dropout_p), dense(out),
                             dense(p), dense(bits), p.device().index());
  });
  if (mask != nullptr) {
    *mask = bits;
  }
  return out;
}

at::Tensor dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  const at::Tensor g = grad.contiguous();
  at::Tensor out = at::empty(g.sizes(), g.options());
  call([&] {
    return launch_dropout(true, generator_for(std::nullopt, g.device())->state(), 1.0, scale, dense(out), dense(g),
                          dense(mask), g.device().index());
  });
  return out;
}
// ANCHOR_END: dropout

// The Rust kernel (kernels/attention.rs) takes one head at a time, its products in registers:
// up to about 3 million multiply-adds per product (query rows x keys x head size, counting only
// the pairs a causal mask keeps) it beats a chain of device operators; anything larger is the
// matrix kernel's (our CPU tuning: a vendor's kernel tiles instead). It takes no dropout, and no
// bias whose gradient is asked for (its backward does not form dS).
constexpr int64_t kRowKernelWork = 3 << 20;

bool row_kernel_applies(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& bias,
                        double dropout_p, bool is_causal) {
  const int64_t l = q.size(-2), n = k.size(-2);
  // The (query, key) pairs the kernel computes: row i of a causal head stops at key i.
  const int64_t m = std::min(l, n);
  const int64_t pairs = is_causal ? m * (m + 1) / 2 + (l - m) * n : l * n;
  return dropout_p == 0.0 && n > 0 && pairs * q.size(-1) <= kRowKernelWork &&
         (!bias || !bias->defined() || bias->dim() <= 4);
}

AttentionShape attention_shape(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& mask, bool is_causal, double scale) {
  AttentionShape a{};
  a.batch = q.size(0);
  a.heads = q.size(1);
  a.kv_heads = k.size(1);
  a.query_len = q.size(2);
  a.key_len = k.size(2);
  a.head_dim = q.size(3);
  a.value_dim = v.size(3);
  a.scale = scale;
  a.causal = is_causal;
  if (mask.defined()) {
    for (size_t d = 0; d < 4; ++d) {
      a.mask_strides[d] = mask.stride(d);
    }
  }
  return a;
}

// An input as the row kernel reads it: any batch, head and row strides, rows contiguous
// (a transposed [B, L, H, D] projection is read in place). Its strides go in slot `which`.
at::Tensor rows_of(const at::Tensor& t, AttentionShape& shape, int which) {
  const at::Tensor r = t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
  for (int d = 0; d < 3; ++d) {
    shape.input_strides[which * 3 + d] = r.stride(d);
  }
  return r;
}

// An output of the row kernel: in the meta function's layout, where the kernel writes it in
// place (its rows contiguous, as in a transposed [B, L, H, D] projection), else contiguous and
// copied after (with_layout_of). Its strides go in output slot `which`.
at::Tensor output_of(const at::Tensor& like, at::IntArrayRef sizes, AttentionShape& shape, int which) {
  at::Tensor out = empty_in_layout_of(like, sizes, like.options());
  if (out.size(3) > 1 && out.stride(3) != 1) {
    out = at::empty(sizes, like.options());
  }
  for (int d = 0; d < 3; ++d) {
    shape.output_strides[which * 3 + d] = out.stride(d);
  }
  return out;
}

// The bias broadcast to [batch, heads, query_len, key_len] (strides 0 where it broadcasts).
at::Tensor expanded_mask(const std::optional<at::Tensor>& bias, const at::Tensor& q, const at::Tensor& k) {
  if (!bias || !bias->defined()) {
    return at::Tensor();
  }
  return bias->expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

// ANCHOR: forward
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0,
              "openreg's fused attention takes a dropout probability in [0, 1); got ", dropout_p);
  if (row_kernel_applies(q, k, bias, dropout_p, is_causal)) {
    const at::Tensor mask = expanded_mask(bias, q, k);
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    AttentionShape shape = attention_shape(q, k, v, mask, is_causal, scale_of(q, scale));
    at::Tensor out = output_of(q, {q.size(0), q.size(1), q.size(2), v.size(3)}, shape, 0);
    const at::Tensor operands[] = {out, lse, rows_of(q, shape, 0), rows_of(k, shape, 1), rows_of(v, shape, 2)};
    Dense slots[5];
    for (int i = 0; i < 5; ++i) {
      slots[i] = dense(operands[i]);
    }
    const bool done = call([&] {
      return launch_attention(false, shape, {slots, 5}, dense(mask), q.device().index());
    });
    if (done) {
      return {with_layout_of(q, out), lse, at::Tensor(), at::Tensor(), q.sym_size(-2), k.sym_size(-2),
              at::scalar_tensor(int64_t{0}, at::kLong), at::scalar_tensor(int64_t{0}, at::kLong),
              at::empty({0}, q.options())};
    }
  }
  const at::Tensor s = scores(q, k, bias, is_causal, scale_of(q, scale)).contiguous();
  // The probabilities and, per query row, the softmax's normaliser log Σ exp(s) (which the
  // backward gets back): one pass of the softmax kernel, which has both on the way. A row
  // masked entirely gives NaN, as the math path's softmax does.
  const auto sizes = s.sizes();
  at::Tensor lse = at::empty(sizes.slice(0, sizes.size() - 1), s.options());
  at::Tensor p = softmax_with_lse(s, lse);
  // Dropout on the probabilities, as flash attention does it: the mask is not kept but drawn
  // again in the backward from the same seed and offset (Philox numbers depend on nothing else).
  PhiloxDraw draw{0, 0};
  if (dropout_p > 0.0) {
    const auto index = q.device().index();
    draw = call([&] { return generator_reserve(generator_for(std::nullopt, q.device())->state(), 4, index); });
    p = dropped(p, draw.seed, draw.offset, dropout_p);
  }
  const at::Tensor pv = ungrouped(at::matmul(grouped(p, v.size(1)), v.to(at::kFloat)), q.size(1));
  at::Tensor out = with_layout_of(q, pv.to(q.scalar_type()));
  at::Tensor debug = return_debug_mask ? p : at::empty({0}, q.options());
  return {out, lse, at::Tensor(), at::Tensor(), q.sym_size(-2), k.sym_size(-2),
          at::scalar_tensor(static_cast<int64_t>(draw.seed), at::kLong),
          at::scalar_tensor(static_cast<int64_t>(draw.offset), at::kLong),
          debug};
}
// ANCHOR_END: forward

// ANCHOR: backward
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& bias, std::array<bool, 4> mask, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt,
    double dropout_p, bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0,
              "openreg's fused attention takes a dropout probability in [0, 1); got ", dropout_p);
  const double sc = scale_of(q, scale);
  const std::optional<at::Tensor> bias_opt = bias.defined() ? std::optional(bias) : std::nullopt;
  const bool bias_grad = mask[3] && bias.defined() && bias.scalar_type() != at::kBool;
  if (row_kernel_applies(q, k, bias_opt, dropout_p, is_causal) && !bias_grad) {
    const at::Tensor m = expanded_mask(bias_opt, q, k);
    AttentionShape shape = attention_shape(q, k, v, m, is_causal, sc);
    at::Tensor gq = output_of(q, q.sizes(), shape, 0), gk = output_of(k, k.sizes(), shape, 1),
               gv = output_of(v, v.sizes(), shape, 2);
    const at::Tensor operands[] = {gq, gk, gv, rows_of(grad_out, shape, 3), rows_of(q, shape, 0),
                                   rows_of(k, shape, 1), rows_of(v, shape, 2), rows_of(out, shape, 4),
                                   lse.to(at::kFloat).contiguous()};
    Dense slots[9];
    for (int i = 0; i < 9; ++i) {
      slots[i] = dense(operands[i]);
    }
    const bool done = call([&] {
      return launch_attention(true, shape, {slots, 9}, dense(m), q.device().index());
    });
    if (done) {
      // The gradients in their inputs' layouts, as the meta function's empty_like promises.
      return {mask[0] ? with_layout_of(q, gq) : at::Tensor(), mask[1] ? with_layout_of(k, gk) : at::Tensor(),
              mask[2] ? with_layout_of(v, gv) : at::Tensor(), at::Tensor()};
    }
  }
  const at::Tensor s = scores(q, k, bias_opt, is_causal, sc);
  const at::Tensor p = s.sub(lse.unsqueeze(-1)).exp_();  // the forward's probabilities
  const at::Tensor d_out = grad_out.to(at::kFloat);
  const at::Tensor qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  // With dropout, the forward multiplied P by a mask (drawn again here from its seed) over
  // 1 - p: dV takes the dropped probabilities, dP goes back through the same mask.
  at::Tensor drop_mask;
  const at::Tensor kept =
      dropout_p > 0.0 ? dropped(p, philox_seed.item<int64_t>(), philox_offset.item<int64_t>(), dropout_p,
                                &drop_mask)
                      : p;
  // dS = P * (dP - rowsum(dP * P)), with dP = dO V^T: softmax's own backward, one kernel.
  const int64_t heads = k.size(1), query_heads = q.size(1);
  at::Tensor d_p = ungrouped(at::matmul(grouped(d_out, heads), vf.transpose(-2, -1)), query_heads);
  if (dropout_p > 0.0) {
    d_p = dropout_backward(d_p, drop_mask, 1.0 / (1.0 - dropout_p));
  }
  const at::Tensor d_s = at::_softmax_backward_data(d_p, p, -1, at::kFloat);
  at::Tensor gq, gk, gv, gb;
  // Grouped, dK and dV sum over the query heads that share a key/value head.
  const at::Tensor d_s_grouped = grouped(d_s, heads);
  if (mask[0]) gq = ungrouped(at::matmul(d_s_grouped, kf), query_heads).mul_(sc).to(q.scalar_type());
  if (mask[1]) gk = at::matmul(d_s_grouped.transpose(-2, -1), grouped(qf, heads)).mul_(sc).to(k.scalar_type());
  if (mask[2]) gv = at::matmul(grouped(kept, heads).transpose(-2, -1), grouped(d_out, heads)).to(v.scalar_type());
  if (mask[3] && bias.defined() && bias.scalar_type() != at::kBool) {
    gb = with_layout_of(bias, d_s.sum_to_size(bias.sizes()).to(bias.scalar_type()));
  }
  const auto like = [](const at::Tensor& input, const at::Tensor& grad) {
    return grad.defined() ? with_layout_of(input, grad) : grad;
  };
  return {like(q, gq), like(k, gk), like(v, gv), gb};
}
// ANCHOR_END: backward

} // namespace

void register_attention() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    // scaled_dot_product_attention asks the stub; torch._fused_sdp_choice asks the operator.
    at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&fused_sdp_choice);
    library.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
    library.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(attention_forward));
    library.impl("_scaled_dot_product_fused_attention_overrideable_backward",
                 TORCH_FN(attention_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
