// Random operators, as CUDA implements them: PyTorch's templates in
// ATen/native/DistributionTemplates.h check the arguments (with CPU's messages) and build the
// iterator; the stubs below hand the output and the generator to one Rust kernel
// (kernels/random.rs), which draws Philox numbers reserved from the generator.

#include "operators/Structured.h"
#include "runtime/Generator.h"

#include <ATen/core/Tensor.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

using at::native::templates::bernoulli_impl_;

// ANCHOR: fill
// One random kernel over `self`: in place when it is contiguous, else into a contiguous
// tensor copied back, so element i of the logical order always gets the same numbers.
void fill(const at::TensorBase& base, RandomOp op, double a, double b, int64_t from, uint64_t range,
          std::optional<at::Generator> gen, const at::Tensor& p = at::Tensor()) {
  at::Tensor self(base);
  OpenRegGeneratorImpl* generator = generator_for(gen, self.device());
  at::Tensor target = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  const Dense probabilities = p.defined() ? dense(p) : Dense{0, 0, 0, 0, 6};
  const bool done = call([&] {
    return launch_random(op, a, b, from, range, dense(target), probabilities, generator->state(),
                         self.device().index());
  });
  TORCH_CHECK_NOT_IMPLEMENTED(done, "openreg's random kernels do not write ", self.scalar_type());
  if (!target.is_same(self)) {
    self.copy_(target);
  }
}
// ANCHOR_END: fill

// The stubs PyTorch's templates call, one per distribution (`RNG` is unused: the generator
// type is always ours).
template <typename RNG>
struct UniformStub {
  void operator()(at::TensorIteratorBase& iter, double from, double to, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Uniform, from, to, 0, 0, gen);
  }
};
template <typename RNG>
struct NormalStub {
  void operator()(const at::TensorBase& self, double mean, double std, std::optional<at::Generator> gen) {
    fill(self, RandomOp::Normal, mean, std, 0, 0, gen);
  }
};
template <typename RNG>
struct LogNormalStub {
  void operator()(at::TensorIteratorBase& iter, double mean, double std, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::LogNormal, mean, std, 0, 0, gen);
  }
};
template <typename RNG>
struct ExponentialStub {
  void operator()(at::TensorIteratorBase& iter, double lambda, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Exponential, lambda, 0, 0, 0, gen);
  }
};
template <typename RNG>
struct GeometricStub {
  void operator()(at::TensorIteratorBase& iter, double p, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Geometric, p, 0, 0, 0, gen);
  }
};
template <typename RNG>
struct CauchyStub {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Cauchy, median, sigma, 0, 0, gen);
  }
};
// random_(): [0, 2^mantissa] for floating types, [0, max] for integers, as CPU draws.
template <typename RNG>
struct RandomStub {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::TensorBase& self = iter.tensor_base(0);
    uint64_t range = 0;
    switch (self.scalar_type()) {
      case at::kFloat: range = (1ULL << 24) + 1; break;
      case at::kDouble: range = (1ULL << 53) + 1; break;
      case at::kHalf: range = (1ULL << 11) + 1; break;
      case at::kBFloat16: range = (1ULL << 8) + 1; break;
      case at::kBool: range = 2; break;
      case at::kByte: range = 256; break;
      case at::kChar: range = 128; break;
      case at::kShort: range = 1ULL << 15; break;
      case at::kInt: range = 1ULL << 31; break;
      case at::kLong: range = 1ULL << 63; break;
      case at::kUInt16: range = 1ULL << 16; break;
      case at::kUInt32: range = 1ULL << 32; break;
      case at::kUInt64: range = 0; break;  // every uint64: 2^64, which the kernel takes as 0
      default: TORCH_CHECK_NOT_IMPLEMENTED(false, "random_ is not implemented for ", self.scalar_type());
    }
    fill(self, RandomOp::Integers, 0, 0, 0, range, gen);
  }
};
template <typename RNG>
struct RandomFromToStub {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t from, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Integers, 0, 0, from, range, gen);
  }
  // Every int64: range 2^64, which the kernel takes as 0.
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    fill(iter.tensor_base(0), RandomOp::Integers, 0, 0, std::numeric_limits<int64_t>::lowest(), 0, gen);
  }
};
template <typename RNG>
struct BernoulliStub {
  void operator()(const at::TensorBase& self, double p, std::optional<at::Generator> gen) {
    fill(self, RandomOp::Bernoulli, p, 0, 0, 0, gen);
  }
  // p per element, broadcast to self's shape; the kernel checks it lies in [0, 1].
  void operator()(const at::TensorBase& self, const at::TensorBase& p, std::optional<at::Generator> gen) {
    const at::Tensor probabilities =
        at::Tensor(p).to(self.device(), at::kFloat).expand(self.sizes()).contiguous();
    fill(self, RandomOp::BernoulliTensor, 0, 0, 0, 0, gen, probabilities);
  }
};

// ANCHOR: registrations
at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return at::native::templates::uniform_impl_<UniformStub, OpenRegGeneratorImpl>(self, from, to, gen);
}
at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl_<NormalStub, OpenRegGeneratorImpl>(self, mean, std, gen);
}
// ANCHOR_END: registrations
at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl<NormalStub, OpenRegGeneratorImpl>(mean, std, gen);
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl<NormalStub, OpenRegGeneratorImpl>(mean, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std,
                                std::optional<at::Generator> gen) {
  return at::native::templates::normal_impl<NormalStub, OpenRegGeneratorImpl>(mean, std, gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return at::native::templates::log_normal_impl_<LogNormalStub, OpenRegGeneratorImpl>(self, mean, std, gen);
}
at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
  return at::native::templates::exponential_impl_<ExponentialStub, OpenRegGeneratorImpl>(self, lambda, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return at::native::templates::geometric_impl_<GeometricStub, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  return at::native::templates::cauchy_impl_<CauchyStub, OpenRegGeneratorImpl>(self, median, sigma, gen);
}
at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return at::native::templates::random_impl<RandomStub, OpenRegGeneratorImpl>(self, gen);
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  return at::native::templates::random_from_to_impl<RandomFromToStub, OpenRegGeneratorImpl>(self, from, to, gen);
}
at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}
at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  check_overlap(self, {&p});  // CPU's kernel reads p through an iterator that refuses this
  return bernoulli_impl_<BernoulliStub, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return bernoulli_impl_<BernoulliStub, OpenRegGeneratorImpl>(self, p, gen);
}
at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  check_overlap(out, {&self});
  return at::native::templates::bernoulli_out_impl<BernoulliStub, OpenRegGeneratorImpl>(out, self, gen);
}

// randperm: CPU's checks, then a permutation by sorted Philox keys.
at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK(!out.is_floating_point() || n <= (out.scalar_type() == at::kDouble ? (1LL << 53) : (1LL << 24)) + 1,
              "n cannot be greater than 2^", out.scalar_type() == at::kDouble ? 53 : 24, "+1 for ",
              out.scalar_type(), " type.");
  out.resize_({n});
  OpenRegGeneratorImpl* generator = generator_for(gen, out.device());
  at::Tensor target = out.is_contiguous() ? out : at::empty({n}, out.options());
  const bool done = call([&] { return launch_randperm(dense(target), generator->state(), out.device().index()); });
  TORCH_CHECK_NOT_IMPLEMENTED(done, "randperm is not implemented for ", out.scalar_type());
  if (!target.is_same(out)) {
    out.copy_(target);
  }
  return out;
}

// multinomial: CPU's argument checks; the distribution's own checks need its values (Rust).
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(replacement || (n_sample <= n_categories),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (1LL << 24), "number of categories cannot exceed 2^24");
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  if (self.dim() == 1) {
    result.resize_({n_sample});
  } else {
    result.resize_({rows, n_sample});
  }
  const at::Tensor weights = self.to(at::kDouble).contiguous();
  at::Tensor target = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
  OpenRegGeneratorImpl* generator = generator_for(gen, self.device());
  call([&] {
    return launch_multinomial(dense(weights), rows, n_categories, n_sample, replacement, dense(target),
                              generator->state(), self.device().index());
  });
  if (!target.is_same(result)) {
    result.copy_(target);
  }
  return result;
}
at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out(self, n_sample, replacement, gen, result);
}

// ANCHOR: native_dropout
// Dropout's mask and output in one Rust kernel (float32, float16, bfloat16), its numbers
// reserved from the device's generator like every random operator's: inside a graph capture
// each replay draws a new mask. Other dtypes: the CPU kernel's composition, with the mask
// drawn by bernoulli_ (above).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const auto bool_options = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, bool_options)};
  }
  if (p == 1.0) {
    return {at::zeros_like(input), at::zeros_like(input, bool_options)};
  }
  const double keep = 1.0 - p;
  const at::Tensor x = input.contiguous();
  at::Tensor output = at::empty_like(x, at::MemoryFormat::Contiguous);
  at::Tensor mask = at::empty_like(x, bool_options, at::MemoryFormat::Contiguous);
  OpenRegGeneratorImpl* generator = generator_for(std::nullopt, x.device());
  const bool done = call([&] {
    return launch_dropout(false, generator->state(), keep, 1.0 / keep, dense(output), dense(x), dense(mask),
                          x.device().index());
  });
  if (done) {
    return {output, mask};
  }
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(1.0 / keep), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  check_devices("native_dropout_backward", {{"grad_output", &grad}, {"mask", &mask}});
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == grad.sizes(),
              "native_dropout_backward: expected a bool mask of the gradient's size ",
              grad.sizes(), ", got ", mask.scalar_type(), " of size ", mask.sizes());
  const at::Tensor g = grad.contiguous(), m = mask.contiguous();
  at::Tensor out = at::empty_like(g, at::MemoryFormat::Contiguous);
  OpenRegGeneratorImpl* generator = generator_for(std::nullopt, g.device());
  const bool done = call([&] {
    return launch_dropout(true, generator->state(), 1.0, scale, dense(out), dense(g), dense(m),
                          g.device().index());
  });
  return done ? out : grad.mul(mask).mul(scale);  // CPU's formula and its types (bool * double is float)
}
// ANCHOR_END: native_dropout

} // namespace

void register_random_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("uniform_", TORCH_FN(uniform_));
    library.impl("normal_", TORCH_FN(normal_));
    library.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
    library.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
    library.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
    library.impl("log_normal_", TORCH_FN(log_normal_));
    library.impl("exponential_", TORCH_FN(exponential_));
    library.impl("geometric_", TORCH_FN(geometric_));
    library.impl("cauchy_", TORCH_FN(cauchy_));
    library.impl("random_", TORCH_FN(random_));
    library.impl("random_.from", TORCH_FN(random_from));
    library.impl("random_.to", TORCH_FN(random_to));
    library.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
    library.impl("bernoulli_.float", TORCH_FN(bernoulli_float_));
    library.impl("bernoulli.out", TORCH_FN(bernoulli_out));
    library.impl("randperm.generator_out", TORCH_FN(randperm_out));
    library.impl("multinomial", TORCH_FN(multinomial));
    library.impl("multinomial.out", TORCH_FN(multinomial_out));
    library.impl("native_dropout", TORCH_FN(native_dropout));
    library.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
