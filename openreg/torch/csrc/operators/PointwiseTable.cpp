// Elementwise operators registered from a table: a row names the operator's schemas
// (functional, in-place, out=), how PyTorch builds its TensorIterator, and the Rust formula
// (`Pointwise::*`, one arm in kernels/elementwise.rs). One boxed kernel serves every row: it
// reads the arguments from the stack, builds the iterator as CPU's kernel does (so shapes,
// broadcasting, type promotion, out= checks and their errors are CPU's), and launches the
// formula. A dtype the formulas do not compute in goes to the CPU fallback, counted.
//
// Adding an operator is one row here and one formula in Rust.

#include "operators/Structured.h"

#include <ATen/native/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/ScalarOps.h>
#include <torch/library.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <unordered_map>

namespace openreg {

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);  // Fallback.cpp

namespace {

// ANCHOR: kinds
// How an operator's TensorIterator is built (the TensorIteratorBase::build_* CPU's kernel uses).
enum class Kind {
  Unary,       // same dtype out (sign, erfinv on floats)
  UnaryFloat,  // integers promoted to the default float (rsqrt, erfinv)
  UnaryBool,   // a bool result (logical_not, isneginf)
  Binary,      // two tensors, promoted (the activations' backwards)
  BinaryFloat, // two tensors, integers promoted to the default float (xlogy)
  Comparison,  // two operands promoted, a bool result (also logical_and, logical_or); a
               // Scalar operand is a CPU scalar input
  Where,       // condition, self, other
  MaskedFill,  // self[mask] = value, in place (the value is the formula's parameter)
};

struct Row {
  std::initializer_list<const char*> schemas;  // every overload this row serves
  Kind kind;
  Pointwise op;
  // Scalars of the schema (other than a comparison's operand) become the formula's parameters.
  // `check`, if any, says whether the formula computes this call (else: CPU's kernel).
  bool (*check)(const std::vector<at::Tensor>& inputs, const std::vector<double>& params) = nullptr;
  // `pick`, if any, chooses between formulas by the parameters (and reorders them).
  Pointwise (*pick)(Pointwise op, std::vector<double>& params) = nullptr;
};
// ANCHOR_END: kinds

bool finite_bound(const std::vector<at::Tensor>&, const std::vector<double>& p) {
  return !p.empty() && !std::isnan(p[0]);  // a NaN bound: CPU's NaN result, from CPU's kernel
}

// Bitwise operators take integers and bools; floats are CPU's (its error).
bool integral(const std::vector<at::Tensor>& inputs, const std::vector<double>&) {
  for (const auto& t : inputs) {
    if (!at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
      return false;
    }
  }
  return true;
}

// clamp's bounds arrive as -inf and inf when absent (see table_kernel). Both absent is CPU's
// error; a NaN bound, CPU's NaN result.
bool some_bound(const std::vector<at::Tensor>&, const std::vector<double>& p) {
  return p.size() == 2 && !std::isnan(p[0]) && !std::isnan(p[1]) &&
         !(p[0] == -INFINITY && p[1] == INFINITY);
}

// Rounding a bool is CPU's error ("not implemented for 'Bool'"), from CPU's kernel.
bool not_bool(const std::vector<at::Tensor>& inputs, const std::vector<double>&) {
  return inputs.empty() || inputs[0].scalar_type() != at::kBool;
}

// softshrink's lambda must be non-negative: CPU's kernel raises its error otherwise.
bool non_negative(const std::vector<at::Tensor>&, const std::vector<double>& p) {
  return !p.empty() && p[0] >= 0;
}

// pow(x, e) keeps x's dtype unless promotion changes it (bool, or an integer to a fractional
// power) or CPU raises (an integer to a negative integer power): CPU's kernel does those.
bool pow_keeps_dtype(const std::vector<at::Tensor>& inputs, const std::vector<double>& p) {
  const at::ScalarType t = inputs[0].scalar_type();
  if (t == at::kBool) {
    return false;
  }
  return !at::isIntegralType(t, /*includeBool=*/false) || (std::floor(p[0]) == p[0] && p[0] >= 0);
}

// elu(alpha, scale, input_scale) has two formulas of two parameters: ELU and SELU (input_scale
// 1), and CELU (scale 1). Any other combination is CPU's.
bool elu_params(const std::vector<at::Tensor>&, const std::vector<double>& p) {
  return p.size() >= 3 && (p[1] == 1.0 || p[2] == 1.0);
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result): from the input.
bool elu_backward_of_input(const std::vector<at::Tensor>& inputs, const std::vector<double>& p) {
  return elu_params(inputs, p) && p.size() == 4 && p[3] == 0.0;
}

// CELU's formula where the input scale is not 1; its parameters become (alpha, input_scale).
Pointwise celu_if_scaled(Pointwise op, std::vector<double>& p) {
  if (p[2] == 1.0) {
    return op;
  }
  p = {p[0], p[2]};
  return op == Pointwise::Elu ? Pointwise::Celu : Pointwise::CeluBackward;
}

// ANCHOR: table
const Row kTable[] = {
    {{"eq.Tensor", "eq_.Tensor", "eq.Tensor_out", "eq.Scalar", "eq_.Scalar", "eq.Scalar_out"}, Kind::Comparison, Pointwise::Eq},
    {{"ne.Tensor", "ne_.Tensor", "ne.Tensor_out", "ne.Scalar", "ne_.Scalar", "ne.Scalar_out"}, Kind::Comparison, Pointwise::Ne},
    {{"lt.Tensor", "lt_.Tensor", "lt.Tensor_out", "lt.Scalar", "lt_.Scalar", "lt.Scalar_out"}, Kind::Comparison, Pointwise::Lt},
    {{"le.Tensor", "le_.Tensor", "le.Tensor_out", "le.Scalar", "le_.Scalar", "le.Scalar_out"}, Kind::Comparison, Pointwise::Le},
    {{"gt.Tensor", "gt_.Tensor", "gt.Tensor_out", "gt.Scalar", "gt_.Scalar", "gt.Scalar_out"}, Kind::Comparison, Pointwise::Gt},
    {{"ge.Tensor", "ge_.Tensor", "ge.Tensor_out", "ge.Scalar", "ge_.Scalar", "ge.Scalar_out"}, Kind::Comparison, Pointwise::Ge},
    {{"logical_not", "logical_not_", "logical_not.out"}, Kind::UnaryBool, Pointwise::LogicalNot},
    {{"logical_and", "logical_and_", "logical_and.out"}, Kind::Comparison, Pointwise::LogicalAnd},
    {{"logical_or", "logical_or_", "logical_or.out"}, Kind::Comparison, Pointwise::LogicalOr},
    {{"bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out"}, Kind::Binary, Pointwise::BitwiseAnd, integral},
    {{"bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out"}, Kind::Binary, Pointwise::BitwiseOr, integral},
    {{"bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out"}, Kind::Binary, Pointwise::BitwiseXor, integral},
    {{"bitwise_not", "bitwise_not_", "bitwise_not.out"}, Kind::Unary, Pointwise::BitwiseNot, integral},
    {{"isneginf", "isneginf.out"}, Kind::UnaryBool, Pointwise::IsNegInf},
    {{"isposinf", "isposinf.out"}, Kind::UnaryBool, Pointwise::IsPosInf},
    {{"where.self", "where.self_out"}, Kind::Where, Pointwise::Where},
    {{"masked_fill_.Scalar"}, Kind::MaskedFill, Pointwise::MaskedFill},
    {{"sign", "sign_", "sign.out", "sgn", "sgn_", "sgn.out"}, Kind::Unary, Pointwise::Sign},
    {{"rsqrt", "rsqrt_", "rsqrt.out"}, Kind::UnaryFloat, Pointwise::Rsqrt},
    {{"erfinv", "erfinv_", "erfinv.out"}, Kind::UnaryFloat, Pointwise::Erfinv},
    {{"sin", "sin_", "sin.out"}, Kind::UnaryFloat, Pointwise::Sin},
    {{"cos", "cos_", "cos.out"}, Kind::UnaryFloat, Pointwise::Cos},
    {{"pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out"}, Kind::Unary, Pointwise::PowScalar, pow_keeps_dtype},
    {{"clamp_min", "clamp_min_", "clamp_min.out"}, Kind::Unary, Pointwise::ClampMin, finite_bound},
    {{"clamp_max", "clamp_max_", "clamp_max.out"}, Kind::Unary, Pointwise::ClampMax, finite_bound},
    {{"hardswish", "hardswish_", "hardswish.out"}, Kind::Unary, Pointwise::Hardswish},
    {{"hardsigmoid", "hardsigmoid_", "hardsigmoid.out"}, Kind::Unary, Pointwise::Hardsigmoid},
    {{"hardswish_backward", "hardswish_backward.out"}, Kind::Binary, Pointwise::HardswishBackward},
    {{"hardsigmoid_backward", "hardsigmoid_backward.grad_input"}, Kind::Binary, Pointwise::HardsigmoidBackward},
    {{"sigmoid_backward", "sigmoid_backward.grad_input"}, Kind::Binary, Pointwise::SigmoidBackward},
    {{"tanh_backward", "tanh_backward.grad_input"}, Kind::Binary, Pointwise::TanhBackward},
    {{"softplus", "softplus.out"}, Kind::Unary, Pointwise::Softplus},
    {{"softplus_backward", "softplus_backward.grad_input"}, Kind::Binary, Pointwise::SoftplusBackward},
    {{"log1p", "log1p_", "log1p.out"}, Kind::UnaryFloat, Pointwise::Log1p},
    {{"log2", "log2_", "log2.out"}, Kind::UnaryFloat, Pointwise::Log2},
    {{"floor", "floor_", "floor.out"}, Kind::Unary, Pointwise::Floor, not_bool},
    {{"ceil", "ceil_", "ceil.out"}, Kind::Unary, Pointwise::Ceil, not_bool},
    {{"trunc", "trunc_", "trunc.out"}, Kind::Unary, Pointwise::Trunc, not_bool},
    {{"threshold", "threshold_", "threshold.out"}, Kind::Unary, Pointwise::Threshold},
    {{"hardshrink", "hardshrink.out"}, Kind::Unary, Pointwise::Hardshrink},
    {{"softshrink", "softshrink.out"}, Kind::Unary, Pointwise::Softshrink, non_negative},
    {{"hardshrink_backward", "hardshrink_backward.grad_input", "softshrink_backward", "softshrink_backward.grad_input"},
     Kind::Binary, Pointwise::ShrinkBackward},
    {{"mish", "mish_", "mish.out"}, Kind::Unary, Pointwise::Mish},
    {{"clamp", "clamp_", "clamp.out"}, Kind::Unary, Pointwise::Clamp, some_bound},
    {{"xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor"}, Kind::BinaryFloat, Pointwise::Xlogy},
    {{"elu", "elu_", "elu.out"}, Kind::Unary, Pointwise::Elu, elu_params, celu_if_scaled},
    {{"elu_backward", "elu_backward.grad_input"}, Kind::Binary, Pointwise::EluBackward, elu_backward_of_input, celu_if_scaled},
    // (grad_output, self, buffer): the gradient is recomputed from self; the buffer is unused.
    {{"log_sigmoid_backward", "log_sigmoid_backward.grad_input"}, Kind::Binary, Pointwise::LogSigmoidBackward},
};
// ANCHOR_END: table

const Row* row_for(const std::string& schema) {
  static const auto rows = [] {
    std::unordered_map<std::string, const Row*> map;
    for (const Row& row : kTable) {
      for (const char* name : row.schemas) {
        map.emplace(name, &row);
      }
    }
    return map;
  }();
  const auto it = rows.find(schema);
  return it == rows.end() ? nullptr : it->second;
}

std::string schema_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name.substr(6) : name.name.substr(6) + "." + name.overload_name;
}

// A CPU scalar (0-dim, wrapped) for a Scalar operand: TensorIterator passes it by value.
at::Tensor scalar_operand(const c10::IValue& v) {
  return at::native::wrapped_scalar_tensor(v.toScalar());
}

// ANCHOR: boxed
void table_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = schema_name(op);
  const Row* row = row_for(name);
  TORCH_INTERNAL_ASSERT(row != nullptr, "no table row for ", name);
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  // The arguments: tensors (a comparison's Scalar operand too) in order, the out= tensor, and
  // the formula's parameters (any other number; an absent optional is NaN).
  std::vector<at::Tensor> inputs;
  std::vector<double> params;
  at::Tensor out;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& v = (*stack)[first + i];
    if (arguments[i].is_out()) {
      out = v.toTensor();
    } else if (v.isTensor()) {
      inputs.push_back(v.toTensor());
    } else if (v.isScalar() && row->kind == Kind::Comparison) {
      inputs.push_back(scalar_operand(v));
    } else if (v.isNone() && row->op == Pointwise::Clamp) {
      params.push_back(params.empty() ? -INFINITY : INFINITY);  // an absent bound does not bound
    } else if (v.isNone()) {
      params.push_back(std::nan(""));
    } else if (v.isBool()) {
      params.push_back(v.toBool() ? 1.0 : 0.0);
    } else if (v.isScalar() && v.toScalar().isComplex()) {
      return run_on_cpu(op, stack);  // the formulas take real parameters
    } else {
      params.push_back(v.toScalar().toDouble());
    }
  }
  const bool in_place = !out.defined() && op.schema().name().back() == '_';
  if (in_place) {
    out = inputs[0];
  }
  if (row->check != nullptr && !row->check(inputs, params)) {
    return run_on_cpu(op, stack);
  }
  const Pointwise formula = row->pick != nullptr ? row->pick(row->op, params) : row->op;
  params.resize(2, 0.0);

  at::TensorIterator iter;
  const at::Tensor& a = inputs[0];
  const at::Tensor b = inputs.size() > 1 ? inputs[1] : at::Tensor();
  switch (row->kind) {
    case Kind::Unary: iter.build_borrowing_unary_op(out, a); break;
    case Kind::UnaryFloat: iter.build_borrowing_unary_float_op(out, a); break;
    case Kind::Binary: iter.build_borrowing_binary_op(out, a, b); break;
    case Kind::BinaryFloat: iter.build_borrowing_binary_float_op(out, a, b); break;
    case Kind::Comparison: {
      // Two tensors of different dtypes are compared in their common dtype, as CPU does.
      const auto cpu_scalar = [](const at::Tensor& t) { return t.dim() == 0 && t.is_cpu(); };
      if (a.scalar_type() != b.scalar_type() && !cpu_scalar(a) && !cpu_scalar(b) && !in_place) {
        const auto type = at::result_type(a, b);
        iter.build_comparison_op(out, a.to(type), b.to(type));
      } else {
        iter.build_borrowing_comparison_op(out, a, b);
      }
      break;
    }
    case Kind::UnaryBool: {
      if (!out.defined()) {
        out = at::empty(a.sizes(), a.options().dtype(at::kBool));
      }
      at::TensorIteratorConfig config;
      config.check_all_same_dtype(false).add_output(out).add_const_input(a);
      iter = config.build();
      break;
    }
    case Kind::Where: {
      // ATen's where_self_out: self and other promoted to their result type, a bool condition,
      // 0-dim CPU operands moved to the device; any other operand elsewhere is the iterator's
      // device error.
      TORCH_CHECK(a.scalar_type() == at::kBool, "where expected condition to be a boolean tensor, but got a tensor with dtype ",
                  a.scalar_type());
      const auto type = at::result_type(inputs[1], inputs[2]);
      TORCH_CHECK(!out.defined() || out.scalar_type() == type, "Expected out type to be ", type, " but got ",
                  out.scalar_type());
      c10::Device device = out.defined() ? out.device() : a.device();
      for (const at::Tensor& t : inputs) {
        if (!out.defined() && !t.is_cpu()) {
          device = t.device();
          break;
        }
      }
      const auto place = [&](const at::Tensor& t) {
        const at::Tensor typed = t.scalar_type() == type || &t == &a ? t : t.to(type);
        return typed.device() != device && typed.dim() == 0 ? typed.to(device) : typed;
      };
      const at::Tensor c = place(a), s = place(inputs[1]), o = place(inputs[2]);
      if (!out.defined()) {
        out = at::empty({0}, s.options().device(device));  // resized by the iterator, as CPU's where does
      }
      at::TensorIteratorConfig config;
      config.check_all_same_dtype(false).add_output(out).add_const_input(c).add_const_input(s).add_const_input(o);
      iter = config.build();
      break;
    }
    case Kind::MaskedFill: {
      // self = mask ? value : self; the mask broadcasts to self, never the other way.
      TORCH_CHECK(b.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
                  b.scalar_type());
      at::TensorIteratorConfig config;
      config.set_check_mem_overlap(false).check_all_same_dtype(false).resize_outputs(false)
          .add_output(a).add_const_input(b).add_const_input(a);
      iter = config.build();
      out = a;
      break;
    }
  }
  if (!run_pointwise(iter, formula, params[0], params[1])) {
    return run_on_cpu(op, stack);  // a dtype the formulas do not compute in
  }
  torch::jit::drop(*stack, arguments.size());
  torch::jit::push(*stack, out.defined() ? out : iter.output(0));
}
// ANCHOR_END: boxed

} // namespace

void register_table_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    for (const Row& row : kTable) {
      for (const char* name : row.schemas) {
        library.impl(name, torch::CppFunction::makeFromBoxedFunction<&table_kernel>());
      }
    }
    return true;
  }();
  (void)registered;
}

} // namespace openreg
