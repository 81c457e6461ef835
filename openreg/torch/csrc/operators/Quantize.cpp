// quantize_per_tensor on openreg: ATen's generic implementation builds the quantized tensor
// (a QTensorImpl in our memory, dispatch key QuantizedPrivateUse1) and calls two
// DispatchStubs, quantize and dequantize, whose PrivateUse1 slots we fill. The arithmetic is
// ATen's CPU quantizer over the runtime's view of the memory (synchronous).

#include "OpenReg.h"

#include <ATen/native/quantized/AffineQuantizer.h>
#include <ATen/ops/dequantize_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/int_repr.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/quantize_per_tensor.h>
#include <ATen/ops/quantize_per_tensor_native.h>
#include <torch/library.h>

namespace openreg {
namespace {

// The integer type a quantized dtype stores.
at::ScalarType storage_type(at::ScalarType q) {
  switch (q) {
    case at::kQUInt8: return at::kByte;
    case at::kQInt8: return at::kChar;
    case at::kQInt32: return at::kInt;
    default: TORCH_CHECK(false, "openreg: quantized dtype ", q, " is not supported");
  }
}

// The integers of an openreg quantized tensor, as a CPU tensor over the runtime's view.
at::Tensor host_ints(const at::Tensor& q) {
  const auto& storage = q.storage();
  const size_t view = call([&] { return host_view(addr(storage.data()), storage.nbytes()); });
  const auto type = storage_type(q.scalar_type());
  char* data = reinterpret_cast<char*>(view) + q.storage_offset() * c10::elementSize(type);
  return at::from_blob(data, q.sizes(), q.strides(), at::TensorOptions().dtype(type));
}

// ANCHOR: quantize
void quantize_kernel(const at::Tensor& rtensor, at::Tensor& qtensor, double scale,
                     int64_t zero_point) {
  const at::Tensor cpu = at::quantize_per_tensor(host_alias(rtensor).contiguous(), scale,
                                                 zero_point, qtensor.scalar_type());
  host_ints(qtensor).copy_(at::int_repr(cpu));
}

void dequantize_kernel(const at::Tensor& qtensor, at::Tensor& rtensor, double scale,
                       int64_t zero_point) {
  host_alias(rtensor).copy_(host_ints(qtensor).to(at::kFloat).sub_(zero_point).mul_(scale));
}
// ANCHOR_END: quantize

} // namespace

void register_quantized_ops() {
  static torch::Library device(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                               __FILE__, __LINE__);
  static torch::Library quantized(torch::Library::IMPL, "aten",
                                  c10::DispatchKey::QuantizedPrivateUse1, __FILE__, __LINE__);
  static bool registered = [] {
    at::native::quantize_tensor_per_tensor_affine_stub.set_privateuse1_dispatch_ptr(&quantize_kernel);
    at::native::dequantize_tensor_per_tensor_affine_stub.set_privateuse1_dispatch_ptr(&dequantize_kernel);
    device.impl("quantize_per_tensor", TORCH_FN(at::native::quantize_per_tensor));
    quantized.impl("dequantize.self", TORCH_FN(at::native::dequantize_quantized));
    quantized.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
    quantized.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
    quantized.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
