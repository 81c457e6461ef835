#include "OpenReg.h"

#include <c10/util/Exception.h>

namespace openreg {

// ANCHOR: throw_error
void throw_error(const rust::Error& error) {
  const c10::SourceLocation where{__func__, __FILE__, __LINE__};
  std::string message = error.what();
  switch (last_error_kind()) {
    case ErrorKind::OutOfMemory:
      throw c10::OutOfMemoryError(where, std::move(message));
    case ErrorKind::Value:
      throw c10::ValueError(where, std::move(message));
    case ErrorKind::Index:
      throw c10::IndexError(where, std::move(message));
    default:
      throw c10::AcceleratorError(where, /*code=*/1, std::move(message));
  }
}
// ANCHOR_END: throw_error

} // namespace openreg
