// Operators about streams rather than data: the CPU fallback cannot run them, because their
// meaning is the device's.

#include "OpenReg.h"

#include <torch/library.h>

namespace openreg {
namespace {

// ANCHOR: record_stream
// Tensor.record_stream(s): the allocator must not reuse this memory before the work queued
// on `s` so far has completed.
void record_stream_kernel(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device() == self.device(), "record_stream: the tensor is on ",
              self.device(), " but the stream is on ", stream.device());
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}
// ANCHOR_END: record_stream

} // namespace

void register_stream_ops() {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                __FILE__, __LINE__);
  static bool registered = [] {
    library.impl("record_stream", TORCH_FN(record_stream_kernel));
    return true;
  }();
  (void)registered;
}

} // namespace openreg
